"""The plot helpers need matplotlib. Debian's python3-matplotlib installs into /usr/bin/python3, which may not be the
first python3 on PATH (a pyenv or venv python), so a plot script started without it re-runs itself under the
system python when that one has it, and otherwise says how to install it."""
import os
import subprocess
import sys

SYSTEM_PYTHON = "/usr/bin/python3"


def ensure_matplotlib():
    """Returns when matplotlib imports here; else re-executes this script under /usr/bin/python3 if that has it;
    else exits 2 with the fix."""
    try:
        import matplotlib  # noqa: F401
        return
    except ImportError:
        pass
    here = os.path.realpath(sys.executable)
    if os.path.exists(SYSTEM_PYTHON) and os.path.realpath(SYSTEM_PYTHON) != here and \
            subprocess.run([SYSTEM_PYTHON, "-c", "import matplotlib"], capture_output=True).returncode == 0:
        os.execv(SYSTEM_PYTHON, [SYSTEM_PYTHON] + sys.argv)
    sys.exit(f"{os.path.basename(sys.argv[0])}: matplotlib is not installed for {sys.executable}; install it with "
             "`sudo apt-get install -y python3-matplotlib` (or `pip install matplotlib`)")
