"""The sweep file: what to vary, what stays fixed, what to measure. Loading, checking, expanding.

A sweep file (YAML):

    name: context-length              # optional; default: the file's stem. Names the output directory.
    label: "..."                      # optional; printed on every plot and in summary.md
    base: configs/gpt-1b-64k.yaml     # a config file (relative to the repository root or to this file),
                                      # or an inline mapping of config sections; absent: built-in defaults
    set:                              # fixed overrides for every point (dotted key -> value)
      train.checkpointing: full
    axes:                             # the product of these is the sweep
      data.seq_len: [16384, 65536]
      parallel.layout: [zigzag, contiguous]
      "parallel.cp, data.seq_len":    # keys joined by commas move together (zipped): one value tuple each
        [[1, 16384], [2, 32768]]
    measure:
      steps: 8                        # optimizer steps per point
      warmup_steps: 3                 # not timed; the median is over the rest
      timeout_s: 900                  # optional: a point running longer is killed and recorded as failed
      per_point:                      # optional: other step counts for the points whose swept values match
        - {when: {data.seq_len: 524288}, steps: 2, warmup_steps: 1}
    gpus: 1                           # optional: devices the ranks spread over (ranks share them evenly)
    device_memory_gib: 140            # optional: memory per device; default: what `ringtrain plan` reports
    env: {NAME: value}                # optional: environment for every run
    mpirun: [--bind-to, none]         # optional: extra mpirun flags
    keep_checkpoints: false           # optional: keep each point's final checkpoint (large for big models)
"""
import itertools
import os
import re

try:
    import yaml
except ImportError:  # launch/sweep.sh checks first; this is for direct use of the module
    raise SystemExit("sweep: PyYAML is missing. Install it with: sudo apt-get install -y python3-yaml")

TOP_KEYS = {"name", "label", "base", "set", "axes", "measure", "gpus", "device_memory_gib", "env", "mpirun",
            "keep_checkpoints"}
MEASURE_KEYS = {"steps", "warmup_steps", "timeout_s", "per_point"}
RULE_KEYS = {"when", "steps", "warmup_steps"}
# Keys the driver sets itself for every point.
RESERVED_KEYS = {"train.steps", "train.run_dir"}
# Written before the user's `set`, so a sweep file may change them.
DEFAULT_SETS = [("train.eval_every", 0), ("checkpoint.every", 0), ("log.every", 1)]


class SpecError(Exception):
    """A problem in the sweep file; the message names the key and what to change."""


def format_value(value):
    """A YAML scalar as `--set` text."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return ""
    if isinstance(value, float):
        return repr(value)
    return str(value)


class Point:
    """One run of the sweep: its swept values (dotted key -> value) and every `--set` override, in order."""

    def __init__(self, index, values, overrides, steps, warmup_steps, point_id=""):
        self.index = index          # 0-based position in the expansion
        self.values = values        # dict, swept keys in axis order
        self.overrides = overrides  # list of "key=value", later ones win
        self.steps = steps          # optimizer steps of this point's run
        self.warmup_steps = warmup_steps  # not timed
        self.id = point_id

    def describe(self):
        return " ".join(f"{short_key(k)}={format_value(v)}" for k, v in self.values.items())


def short_key(dotted):
    return dotted.rsplit(".", 1)[-1]


def _slug_value(value):
    return re.sub(r"[^A-Za-z0-9._-]", "_", format_value(value)) or "empty"


def point_ids(points, swept_keys):
    """Readable, stable directory names of plain characters: 'seq_len-65536__cp-2'. The full dotted key is used
    where two swept keys share a last component. A point's id depends only on its values, so a resumed sweep
    finds it."""
    shorts = [short_key(k) for k in swept_keys]
    names = {k: (k if shorts.count(short_key(k)) > 1 else short_key(k)) for k in swept_keys}
    ids = []
    for p in points:
        parts = [f"{names[k]}-{_slug_value(v)}" for k, v in p.values.items()]
        ids.append("__".join(parts) if parts else "single")
    seen = {}
    for i, pid in enumerate(ids):
        if pid in seen:
            raise SpecError(f"points {seen[pid] + 1} and {i + 1} get the same directory name '{pid}': "
                            "make the axis values distinct")
        seen[pid] = i
    return ids


class Sweep:
    def __init__(self, path, data, repo_root):
        self.path = os.path.abspath(path)
        self.repo_root = repo_root
        self.data = data
        self.name = str(data.get("name") or os.path.splitext(os.path.basename(path))[0])
        self.label = str(data.get("label") or "")
        self.axes = []              # list of (keys tuple, list of value tuples)
        self.fixed = []             # list of (key, value)
        self.steps = 0
        self.warmup_steps = 0
        self.timeout_s = None
        self.measure_rules = []     # list of (when: {key: text}, steps, warmup_steps)
        self.gpus = None
        self.device_memory_bytes = None
        self.env = {}
        self.mpirun = []
        self.keep_checkpoints = False
        self.base_path = None       # a config file, or None: inline / defaults (written out by the driver)
        self.base_inline = None     # dict, when `base` is a mapping
        self._parse()

    # ---- parsing ----
    def _parse(self):
        d = self.data
        unknown = sorted(set(d) - TOP_KEYS)
        if unknown:
            raise SpecError(f"{self.path}: unknown key(s) {', '.join(unknown)}; known: {', '.join(sorted(TOP_KEYS))}")
        self._parse_base(d.get("base"))
        sets = d.get("set") or {}
        if not isinstance(sets, dict):
            raise SpecError(f"{self.path}: 'set' must be a mapping of dotted config keys to values")
        for key, value in sets.items():
            self._check_key(key, "set")
            self._check_scalar(value, f"set.{key}")
            self.fixed.append((key, value))
        self._parse_axes(d.get("axes"))
        self._parse_measure(d.get("measure"))
        if d.get("gpus") is not None:
            self.gpus = self._positive_int(d["gpus"], "gpus")
        if d.get("device_memory_gib") is not None:
            gib = d["device_memory_gib"]
            if isinstance(gib, bool) or not isinstance(gib, (int, float)) or gib <= 0:
                raise SpecError(f"{self.path}: device_memory_gib must be a positive number (GiB), got {gib!r}")
            self.device_memory_bytes = float(gib) * 2**30
        env = d.get("env") or {}
        if not isinstance(env, dict):
            raise SpecError(f"{self.path}: 'env' must be a mapping NAME: value")
        self.env = {str(k): format_value(v) for k, v in env.items()}
        mpirun = d.get("mpirun") or []
        if isinstance(mpirun, str):
            mpirun = mpirun.split()
        if not isinstance(mpirun, list):
            raise SpecError(f"{self.path}: 'mpirun' must be a list of extra mpirun flags")
        self.mpirun = [str(x) for x in mpirun]
        self.keep_checkpoints = bool(d.get("keep_checkpoints", False))
        for when, _, _ in self.measure_rules:
            for k in when:
                if k not in self.swept_keys():
                    raise SpecError(f"{self.path}: measure.per_point: '{k}' is not a swept key "
                                    f"(axes: {', '.join(self.swept_keys()) or 'none'})")

    def _parse_base(self, base):
        if base is None:
            self.base_inline = {}
        elif isinstance(base, dict):
            self.base_inline = base
        elif isinstance(base, str):
            candidates = [base] if os.path.isabs(base) else [
                os.path.join(self.repo_root, base), os.path.join(os.path.dirname(self.path), base)]
            for c in candidates:
                if os.path.isfile(c):
                    self.base_path = os.path.abspath(c)
                    return
            raise SpecError(f"{self.path}: base config '{base}' not found (looked in {', '.join(candidates)}); "
                            "give a path relative to the repository root, or an inline mapping")
        else:
            raise SpecError(f"{self.path}: 'base' must be a config path or a mapping, got {base!r}")

    def _parse_axes(self, axes):
        if axes is None:
            axes = {}
        if not isinstance(axes, dict):
            raise SpecError(f"{self.path}: 'axes' must be a mapping of dotted keys to lists of values")
        seen = set()
        for raw_key, values in axes.items():
            keys = tuple(k.strip() for k in str(raw_key).split(","))
            for k in keys:
                self._check_key(k, "axes")
                if k in seen:
                    raise SpecError(f"{self.path}: axes: '{k}' appears twice")
                seen.add(k)
            if not isinstance(values, list) or not values:
                raise SpecError(f"{self.path}: axes.{raw_key} must be a non-empty list of values")
            tuples = []
            for v in values:
                if len(keys) == 1:
                    self._check_scalar(v, f"axes.{raw_key}")
                    tuples.append((v,))
                else:
                    if not isinstance(v, list) or len(v) != len(keys):
                        raise SpecError(f"{self.path}: axes.{raw_key}: every value must be a list of "
                                        f"{len(keys)} values (one per key), got {v!r}")
                    for x in v:
                        self._check_scalar(x, f"axes.{raw_key}")
                    tuples.append(tuple(v))
            if len(set(map(lambda t: tuple(format_value(x) for x in t), tuples))) != len(tuples):
                raise SpecError(f"{self.path}: axes.{raw_key} repeats a value")
            self.axes.append((keys, tuples))

    def _parse_measure(self, m):
        if not isinstance(m, dict):
            raise SpecError(f"{self.path}: 'measure' is required: measure: {{steps: N, warmup_steps: W}}")
        unknown = sorted(set(m) - MEASURE_KEYS)
        if unknown:
            raise SpecError(f"{self.path}: measure: unknown key(s) {', '.join(unknown)}; "
                            f"known: {', '.join(sorted(MEASURE_KEYS))}")
        self.steps, self.warmup_steps = self._steps(m, "measure", None)
        rules = m.get("per_point") or []
        if not isinstance(rules, list):
            raise SpecError(f"{self.path}: measure.per_point must be a list of {{when: {{key: value}}, steps: N}}")
        for i, rule in enumerate(rules):
            where = f"measure.per_point[{i}]"
            if not isinstance(rule, dict) or not isinstance(rule.get("when"), dict) or not rule["when"]:
                raise SpecError(f"{self.path}: {where} needs when: {{swept key: value, ...}}")
            unknown = sorted(set(rule) - RULE_KEYS)
            if unknown:
                raise SpecError(f"{self.path}: {where}: unknown key(s) {', '.join(unknown)}; "
                                f"known: {', '.join(sorted(RULE_KEYS))}")
            steps, warmup = self._steps(rule, where, (self.steps, self.warmup_steps))
            when = {str(k): format_value(v) for k, v in rule["when"].items()}
            self.measure_rules.append((when, steps, warmup))
        if m.get("timeout_s") is not None:
            t = m["timeout_s"]
            if isinstance(t, bool) or not isinstance(t, (int, float)) or t <= 0:
                raise SpecError(f"{self.path}: measure.timeout_s must be a positive number, got {t!r}")
            self.timeout_s = float(t)

    def _steps(self, m, where, defaults):
        steps = m.get("steps", defaults[0] if defaults else None)
        steps = self._positive_int(steps, f"{where}.steps")
        w = m.get("warmup_steps", defaults[1] if defaults else 0)
        if isinstance(w, bool) or not isinstance(w, int) or w < 0:
            raise SpecError(f"{self.path}: {where}.warmup_steps must be a non-negative integer, got {w!r}")
        if w >= steps:
            raise SpecError(f"{self.path}: {where}.warmup_steps ({w}) must be less than steps ({steps}) so that "
                            "at least one step is timed")
        return steps, w

    def _positive_int(self, v, where):
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise SpecError(f"{self.path}: {where} must be a positive integer, got {v!r}")
        return v

    def _check_key(self, key, where):
        if not isinstance(key, str) or not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*", key):
            raise SpecError(f"{self.path}: {where}: '{key}' is not a dotted config key such as data.seq_len")
        if key in RESERVED_KEYS:
            raise SpecError(f"{self.path}: {where}: '{key}' is set by the sweep itself "
                            "(use measure.steps; the run directory is inside the sweep's output)")

    def _check_scalar(self, v, where):
        if isinstance(v, (dict, list)):
            raise SpecError(f"{self.path}: {where}: values must be scalars, got {v!r}")

    # ---- expansion ----
    def swept_keys(self):
        return [k for keys, _ in self.axes for k in keys]

    def zipped_with(self, key):
        """Keys that move together with `key` (a zipped axis), excluding key itself."""
        for keys, _ in self.axes:
            if key in keys:
                return [k for k in keys if k != key]
        return []

    def points(self, extra_sets=()):
        """The product of the axes, in file order (the last axis varies fastest)."""
        extra_sets = list(extra_sets)
        points = []
        combos = itertools.product(*[values for _, values in self.axes]) if self.axes else [()]
        for i, combo in enumerate(combos):
            values = {}
            for (keys, _), tup in zip(self.axes, combo):
                values.update(zip(keys, tup))
            steps, warmup = self.steps, self.warmup_steps
            for when, rule_steps, rule_warmup in self.measure_rules:
                if all(k in values and format_value(values[k]) == v for k, v in when.items()):
                    steps, warmup = rule_steps, rule_warmup
                    break
            # The LR warm-up must fit in the short run (ringtrain refuses warmup_steps > steps); the whole
            # run warming up keeps the learning rate small, which leaves the step time unchanged.
            # Only a sweep that keeps checkpoints pays for the final save (~17 GB for the 1.41B model).
            defaults = DEFAULT_SETS + [("optim.warmup_steps", steps),
                                       ("checkpoint.save_final", self.keep_checkpoints)]
            overrides = [f"{k}={format_value(v)}" for k, v in defaults]
            overrides += [f"{k}={format_value(v)}" for k, v in self.fixed]
            overrides += list(extra_sets)
            overrides += [f"{k}={format_value(v)}" for k, v in values.items()]
            overrides.append(f"train.steps={steps}")
            points.append(Point(i, values, overrides, steps, warmup))
        for p, pid in zip(points, point_ids(points, self.swept_keys())):
            p.id = pid
        return points


def load_sweep(path, repo_root):
    if not os.path.isfile(path):
        raise SpecError(f"sweep file '{path}' not found")
    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as e:
            raise SpecError(f"{path}: not valid YAML: {e}")
    if not isinstance(data, dict):
        raise SpecError(f"{path}: a sweep file is a mapping with base, axes and measure (see configs/sweeps/)")
    return Sweep(path, data, repo_root)
