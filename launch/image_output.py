"""The image the plot scripts write (launch/plot_needles.py, launch/plot_loss_by_position.py: --out), under the
rule every --out follows (README "When things go wrong"):
  - refused up front with `<script>: error: --out ...` and exit 2 when it cannot be written: empty, a directory,
    something else that is not a regular file (a device, a pipe), a directory that does not exist or cannot be
    written;
  - drawn into a temporary beside it and renamed, so a failure (a full disk, a format matplotlib cannot write)
    leaves no half-written image; the file written is exactly --out, in the format of its extension (png when it
    has none).
A plot is redrawn from its results at will, so an existing image is replaced (no --overwrite needed).
"""
import os
import sys
import tempfile


def _fail(script, message):
    print(f"{script}: error: --out {message}", file=sys.stderr)
    sys.exit(2)


def check_image_out(script, out):
    if not out.strip():
        _fail(script, "is empty; give the image file to write, e.g. --out plot.png")
    if os.path.isdir(out):
        _fail(script, f"'{out}' is a directory; give a file path, e.g. --out {os.path.join(out, 'plot.png')}")
    if os.path.lexists(out) and not os.path.isfile(out):  # a device or a pipe is never renamed over
        _fail(script, f"'{out}' exists and is not a regular file; give a file path, e.g. --out plot.png")
    parent = os.path.dirname(os.path.abspath(out))
    if not os.path.isdir(parent):
        _fail(script, f"'{out}': its directory {parent} does not exist; create it first")
    if not os.access(parent, os.W_OK | os.X_OK):
        _fail(script, f"'{out}': its directory {parent} cannot be written")


def save_figure(script, fig, out, **savefig_args):
    check_image_out(script, out)
    fmt = os.path.splitext(out)[1].lstrip(".").lower() or "png"
    fd, tmp = tempfile.mkstemp(prefix="." + os.path.basename(out) + ".", suffix=".tmp",
                               dir=os.path.dirname(os.path.abspath(out)))
    os.close(fd)
    try:
        fig.savefig(tmp, format=fmt, **savefig_args)
        os.replace(tmp, out)
    except (OSError, ValueError) as e:  # a full disk; a format matplotlib does not write
        if os.path.exists(tmp):
            os.remove(tmp)
        _fail(script, f"'{out}' cannot be written: {e}")
