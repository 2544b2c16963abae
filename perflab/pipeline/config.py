"""Load, validate and resolve the configuration — before any job runs.

``resolve(config)`` is what the Snakefile calls at parse time and what a
standalone script calls on its own: it validates against
``workflow/schemas/config.schema.yaml`` (filling defaults), applies the scale
patch, checks what a schema cannot (scale names, experiment ids, workload
targets, device availability, device/dtype combinations), picks the device
and names the result directory. Any problem raises :class:`ConfigError`
with one message that names the offending key.
"""

from __future__ import annotations

import copy
import functools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import jsonschema
import yaml

from perflab.core import affinity, io
from perflab.experiments.catalogue import EXPERIMENTS

ROOT = Path(__file__).resolve().parents[2]
SCHEMA_PATH = ROOT / "workflow" / "schemas" / "config.schema.yaml"
DEFAULT_CONFIG = ROOT / "config" / "config.yaml"


class ConfigError(ValueError):
    """A configuration value that cannot run; the message names its key."""


def _with_defaults(validator_class):
    validate_properties = validator_class.VALIDATORS["properties"]

    def set_defaults(validator, properties, instance, schema):
        if isinstance(instance, dict):
            for prop, sub in properties.items():
                if "default" in sub and prop not in instance:
                    instance[prop] = copy.deepcopy(sub["default"])
        yield from validate_properties(validator, properties, instance, schema)

    return jsonschema.validators.extend(validator_class, {"properties": set_defaults})


def _whole_numbers_only(validator_class):
    """``integer`` means an int: jsonschema also takes a whole float (``repeats: 30.0``), which
    then fails inside a job (``range(30.0)``) without naming its key."""
    checker = validator_class.TYPE_CHECKER.redefine(
        "integer", lambda _checker, x: isinstance(x, int) and not isinstance(x, bool))
    return jsonschema.validators.extend(validator_class, type_checker=checker)


_Validator = _with_defaults(_whole_numbers_only(jsonschema.Draft7Validator))


def _check_finite(tree: Any, path: tuple = ()) -> None:
    """No value anywhere is NaN or infinite: a bound compared with NaN is never exceeded
    (``long_run_hours: .nan`` switched the long-run guard off), and no count is infinite."""
    import math

    if isinstance(tree, Mapping):
        for k, v in tree.items():
            _check_finite(v, (*path, k))
    elif isinstance(tree, (list, tuple)):
        for i, v in enumerate(tree):
            _check_finite(v, (*path, i))
    elif isinstance(tree, float) and not math.isfinite(tree):
        raise ConfigError(f"config error at '{_key(path)}': {tree} is not a finite number")


def load_schema() -> dict:
    """The run's schema: the workflow's (every key but the experiments') with each
    experiment's parameters, declared by its module (``SCHEMA``), under
    ``experiments.<id>``."""
    from perflab.experiments import modules

    with open(SCHEMA_PATH) as fh:
        schema = yaml.safe_load(fh)
    own = schema["properties"]["experiments"]["properties"]
    for eid, mod in modules().items():
        own[eid] = {"type": "object", "additionalProperties": False, "default": {},
                    "properties": yaml.safe_load(mod.SCHEMA) or {}}
    return schema


def declared_scale(scale: str) -> dict:
    """The experiments' own sizes at ``scale`` (each module's ``SCALES``), as a config patch."""
    from perflab.experiments import modules

    return {"experiments": {eid: mod.SCALES[scale] for eid, mod in modules().items()
                            if scale in getattr(mod, "SCALES", {})}}


def _key(path) -> str:
    return ".".join(str(p) for p in path) or "<top level>"


def _schema_check(cfg: dict, schema: dict, where: str = "") -> None:
    errors = sorted(_Validator(schema).iter_errors(cfg), key=lambda e: list(e.absolute_path))
    if not errors:
        return
    err = jsonschema.exceptions.best_match(errors)
    # an alternative of a oneOf ("not one of ['auto']") misleads: report the oneOf itself
    while err.parent is not None and err.parent.validator == "oneOf":
        err = err.parent
    path = list(err.absolute_path)
    if err.validator == "additionalProperties":
        # name the unknown key itself, not its parent
        allowed = sorted(err.schema.get("properties", {}))
        extra = sorted(set(err.instance) - set(allowed))
        key = _key(path + extra[:1])
        raise ConfigError(
            f"config error at '{key}'{where}: unknown key"
            + (f" (allowed here: {', '.join(allowed)})" if allowed else "")
        )
    msg = err.message
    desc = (err.schema.get("description") or "").strip()
    if err.validator == "oneOf":
        msg = f"{err.instance!r} is not valid"
    if desc:
        msg += f" (expected: {desc})"
    raise ConfigError(f"config error at '{_key(path)}'{where}: {msg}")


def deep_merge(base: Mapping, patch: Mapping) -> dict:
    out = copy.deepcopy(dict(base))
    for k, v in patch.items():
        if isinstance(v, Mapping) and isinstance(out.get(k), Mapping):
            out[k] = deep_merge(out[k], v)
        else:
            out[k] = copy.deepcopy(v)
    return out


class _StrictLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping (YAML keeps the last)."""


def _strict_mapping(loader: _StrictLoader, node: yaml.MappingNode) -> dict:
    # the keys written here, not those a merge key (``<<: *base``) brings in: overriding
    # a merged key is what merging is for
    written = [k for k, _ in node.value if k.tag != "tag:yaml.org,2002:merge"]
    loader.flatten_mapping(node)
    first: dict[Any, int] = {}
    for key_node in written:
        key = loader.construct_object(key_node, deep=True)
        try:
            seen = key in first
        except TypeError:  # an unhashable key: the constructor below names it
            continue
        if seen:  # on another line, or on the same one ({seed: 1, seed: 2})
            raise yaml.constructor.ConstructorError(
                None, None, f"duplicate key {key!r} (first given on line {first[key] + 1})",
                key_node.start_mark)
        first[key] = key_node.start_mark.line
    return loader.construct_mapping(node, deep=True)


class _DuplicateJSONKey(Exception):
    pass


def _strict_json_object(pairs: list[tuple[str, Any]]) -> dict:
    out: dict = {}
    for k, v in pairs:
        if k in out:
            raise _DuplicateJSONKey(k)
        out[k] = v
    return out


_StrictLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _strict_mapping)


def load_yaml(path: str | Path) -> dict:
    """A config file's mapping, or one :class:`ConfigError` naming the file (and the line)."""
    path = Path(path)
    if path.is_dir():
        raise ConfigError(f"config file {str(path)!r} is a directory, not a YAML file")
    if not path.is_file():
        raise ConfigError(f"config file {str(path)!r} does not exist")
    try:
        text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(f"config file {str(path)!r} cannot be read as text ({exc})") from None
    try:
        # Snakemake reads a config file as JSON first, then as YAML: so does this, or a JSON
        # file it took (indented with tabs, which YAML refuses) would be refused here
        data = json.loads(text, object_pairs_hook=_strict_json_object)
    except _DuplicateJSONKey as exc:
        raise ConfigError(f"config file {str(path)!r}: duplicate key {exc.args[0]!r} in a "
                          "JSON object") from None
    except ValueError:  # not JSON
        data = _strict_yaml(path, text)
    if data is None:  # Snakemake refuses it too, but without naming the file
        raise ConfigError(f"config file {str(path)!r} holds no settings (it is empty, or only "
                          "comments): give at least one key, or leave the file out")
    if not isinstance(data, dict):
        raise ConfigError(f"config file {str(path)!r} must hold a mapping at its top level "
                          f"(keys such as device: or timing:), not a {type(data).__name__}")
    return data


def _strict_yaml(path: Path, text: str) -> Any:
    try:
        return yaml.load(text, Loader=_StrictLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        where = f", line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        what = " ".join(str(x) for x in (exc.context, exc.problem) if x)
        raise ConfigError(f"config file {str(path)!r}{where}: {what}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {str(path)!r}: not valid YAML ({exc})") from None


def user_layer(configfiles: list[str | Path], overrides: Mapping[str, Any] | None = None) -> dict:
    """What the user set: their config files (read strictly) and overrides, merged in order.

    A scale sets defaults beneath this layer, never over it (:func:`resolve`).
    """
    out: dict = {}
    for f in configfiles:
        out = deep_merge(out, load_yaml(f))
    return deep_merge(out, overrides or {})


def by_default(devices: int = 1) -> list[str]:
    """The experiments ``run: all`` selects on a machine with ``devices`` CUDA devices (a CPU: 1).

    An experiment that needs several devices (D01, data parallel) is left out where there are
    fewer: named, it still runs (on a CPU, its ranks share the cores). One that is not
    ``in_all`` (W01, the what-if set) is left out everywhere: it runs when named, or through
    ``perflab whatif`` and ``perflab diagnose``.
    """
    return [eid for eid, e in EXPERIMENTS.items()
            if e.in_all and e.devices <= max(devices, 1)]


def selected_experiments(run: str | list[str], devices: int = 1) -> list[str]:
    if isinstance(run, str):
        items = [s.strip() for s in run.split(",") if s.strip()]
    else:
        items = list(run)
    if not items:
        raise ConfigError("config error at 'run': no experiment named (use all or ids like E01,E03)")
    everything = by_default(devices)
    if any(i.lower() == "all" for i in items):
        # `all` may stand beside the ids it leaves out (all,D01), and only those
        again = [i for i in items if i.lower() != "all" and i.upper() in everything]
        if again:
            raise ConfigError("config error at 'run': 'all' selects every experiment that runs "
                              f"here already ({', '.join(again)} among them); beside it name "
                              "only those it leaves out (W01; D01 without two CUDA devices)")
    ids = []
    for item in items:
        if item.lower() == "all":
            ids += [e for e in everything if e not in ids]
            continue
        eid = item.upper()
        if eid not in EXPERIMENTS:
            raise ConfigError(
                f"config error at 'run': unknown experiment {item!r} "
                f"(available: all, {', '.join(EXPERIMENTS)})"
            )
        if eid not in ids:
            ids.append(eid)
    return ids


def _cuda_available() -> bool:
    import torch

    return torch.cuda.is_available()


def _resolve_device(requested: str, check: bool = True) -> str:
    # torch only where CUDA must be asked about: a CPU run parses its workflow without it
    if requested == "cpu":
        return "cpu"
    import torch

    if requested == "auto":
        return "cuda:0" if torch.cuda.is_available() else "cpu"
    if requested.startswith("cuda") and not check:
        # a cluster's submit host: the job checks on the node that runs it
        return f"cuda:{int(requested.split(':')[1]) if ':' in requested else 0}"
    if requested.startswith("cuda"):
        if not torch.cuda.is_available():
            raise ConfigError(
                f"config error at 'device': {requested!r} requested but this torch sees no "
                "CUDA device (use device: auto or cpu)"
            )
        index = int(requested.split(":")[1]) if ":" in requested else 0
        if index >= torch.cuda.device_count():
            raise ConfigError(
                f"config error at 'device': {requested!r} but only "
                f"{torch.cuda.device_count()} CUDA device(s) are visible"
            )
        return f"cuda:{index}"
    return "cpu"


def _devices(device: str, check: bool) -> int:
    """CUDA devices this run can use (1 on a CPU, or on a submit host that cannot look)."""
    if not device.startswith("cuda") or not check:
        return 1
    import torch

    return torch.cuda.device_count()


def export_import_path(root: str | Path) -> None:
    """Put ``root`` first on PYTHONPATH, for the processes this one starts.

    The workflow calls it at parse time with the repository: its jobs inherit the
    environment (locally, in a conda env of ``--sdm conda``, through sbatch on a
    cluster) and so import this checkout's perflab, not another installed copy.
    """
    import os

    rest = [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p]
    os.environ["PYTHONPATH"] = os.pathsep.join(dict.fromkeys([str(root), *rest]))


def _check_dirs(cfg: dict) -> None:
    """results_dir and figures_dir must be (or become) directories this process can write."""
    import os

    for key in ("results_dir", "figures_dir"):
        if "\0" in cfg[key]:
            raise ConfigError(f"config error at '{key}': {cfg[key]!r} holds a NUL byte")
        # every path perflab writes stays under the run directory: a relative path may not
        # climb out of it (an absolute one is the user's explicit choice)
        if not Path(cfg[key]).is_absolute() and ".." in Path(os.path.normpath(cfg[key])).parts:
            raise ConfigError(f"config error at '{key}': {cfg[key]!r} climbs out of the run "
                              "directory; give a path under it, or an absolute one")
        path = Path(cfg[key])
        probe = path
        while not probe.exists() and probe != probe.parent:
            probe = probe.parent
        if probe.exists() and not probe.is_dir():
            what = "is" if probe == path else f"lies under {str(probe)!r}, which is"
            raise ConfigError(
                f"config error at '{key}': {str(path)!r} {what} a file, not a directory"
            )
        if probe.is_dir() and not os.access(probe, os.W_OK | os.X_OK):
            raise ConfigError(f"config error at '{key}': {str(probe)!r} is not writable")


def _check_workloads(cfg: dict) -> None:
    # a registered builder is checked from its source, without torch (perflab/core/targets.py);
    # anything else is imported, as a job will
    from perflab.core.targets import WorkloadError, check_accepted, registered

    for name, params in cfg["workloads"].items():
        target = params.get("target", name)
        rest = {k: v for k, v in params.items() if k != "target"}
        if target in registered():
            check = functools.partial(check_accepted, target, registered()[target])
        else:
            from perflab.instruments.workloads import check_params, resolve_target

            try:
                resolve_target(target)
            except WorkloadError as exc:
                raise ConfigError(f"config error at 'workloads.{name}.target': {exc}") from None
            check = functools.partial(check_params, target)
        try:
            check({**rest, "seed": cfg["seed"]})
        except WorkloadError as exc:
            raise ConfigError(f"config error at 'workloads.{name}.{exc.param}': {exc}") from None
    w = cfg["workload"]
    if w not in cfg["workloads"] and w not in registered():
        from perflab.instruments.workloads import REGISTRY, resolve_target

        try:
            resolve_target(w)
        except WorkloadError as exc:
            raise ConfigError(
                f"config error at 'workload': {exc} (or a name under workloads: "
                f"{', '.join(sorted(cfg['workloads'])) or 'none defined'}; registered: "
                f"{', '.join(sorted(REGISTRY))})"
            ) from None


def _check_tag(cfg: dict) -> None:
    """A tag is one directory name under results/, figures/ and logs/: never a path escape."""
    tag = cfg["tag"]
    if len(tag) > 200:
        raise ConfigError(f"config error at 'tag': {len(tag)} characters; a tag is one directory "
                          "name, at most 200 characters")
    if tag != "auto" and set(tag) == {"."}:
        raise ConfigError(f"config error at 'tag': {tag!r} would name the directory above the "
                          "results (a tag is one directory name: letters, digits, '.', '_', '-', "
                          "not only dots)")


def _check_accumulation(cfg: dict) -> None:
    """E17's micro-batch counts must divide its batch (else a K measures another batch)."""
    p = cfg["experiments"].get("E17", {})
    batch, ks = p.get("batch"), p.get("ks", [])
    bad = [k for k in ks if isinstance(batch, int) and batch % k]
    if bad:
        raise ConfigError(f"config error at 'experiments.E17.ks': {bad[0]} does not divide the "
                          f"batch of {batch} (experiments.E17.batch); each K must")


def _check_compare_to(cfg: dict) -> None:
    """``compare_to`` must be another run's result directory or a shipped reference run."""
    target = cfg["compare_to"]
    if not target:
        return
    shipped = ", ".join(f"report/reference/{r}" for r in sorted(
        p.name for p in io.REFERENCE_DIR.glob("*") if (p / "run.json").is_file()))
    hint = (f"(a result directory results/<tag> of another run, or a shipped run: {shipped})")
    d = Path(target)
    if not d.is_dir():
        what = "is a file" if d.exists() else "does not exist"
        raise ConfigError(f"config error at 'compare_to': {target!r} {what} {hint}")
    csvs, _ = io.result_dir(d)
    try:
        found = io.result_csvs(csvs)
    except ValueError as exc:  # a CSV there that does not parse: named
        raise ConfigError(f"config error at 'compare_to': {exc}") from None
    if not found:
        raise ConfigError(f"config error at 'compare_to': {target!r} holds no perflab result "
                          f"CSV {hint}")


def _scale_patch(cfg: dict, schema: dict, scale: str,
                 user: Mapping[str, Any] | None) -> tuple[dict, dict]:
    """``cfg`` with scale ``scale``'s patch applied beneath the user's own values.

    A scale sets defaults, never overrides: every value ``user`` set (their config
    files and overrides) is put back over the patch, and each one the patch would have
    changed is returned with both values (said in the log and every affected contract).
    """
    if scale not in cfg["scales"]:
        raise ConfigError(
            f"config error at 'scale': unknown scale {scale!r} "
            f"(defined: {', '.join(['auto', 'chapter', *sorted(cfg['scales'])])})"
        )
    patch = cfg["scales"][scale]
    if "scales" in patch or "scale" in patch:
        raise ConfigError(f"config error at 'scales.{scale}': a scale cannot set scale(s)")
    # the experiments' own sizes at this scale, beneath what the config's scale sets
    patch = deep_merge(declared_scale(scale), patch)
    out = deep_merge(cfg, patch)
    kept = {}
    if user:
        mine = dict(_leaves(user))
        for key, theirs in _leaves(patch):
            if key in mine and mine[key] != theirs:
                kept[key] = {"yours": mine[key], "scale": theirs}
        out = deep_merge(out, {k: v for k, v in user.items() if k not in ("scale", "scales")})
    _schema_check(out, schema, where=f" (after applying scales.{scale})")
    return out, kept


def _leaves(tree: Mapping[str, Any], prefix: str = ""):
    """(dotted key, value) of every non-mapping value in a nested mapping."""
    for k, v in tree.items():
        if isinstance(v, Mapping) and v:
            yield from _leaves(v, f"{prefix}{k}.")
        else:
            yield f"{prefix}{k}", v


def resolve(config: Mapping[str, Any], check_device: bool = True,
            user: Mapping[str, Any] | None = None) -> dict:
    """Validate ``config`` and return the resolved run configuration.

    The result is the validated config with the scale patch applied and three
    derived keys: ``resolved_device`` (``cpu`` or ``cuda:N``),
    ``resolved_scale`` and ``resolved_tag`` (the result directory name).

    ``user``: the values the user set (:func:`user_layer`); a scale's patch goes
    beneath them, never over them. Without it every value may be scaled.

    ``check_device=False`` is for a cluster's submit host, which need not see
    the GPU its jobs will get: an explicit ``cuda`` device is taken on trust
    (each job checks it again on its node), and the tag must then be explicit,
    since no GPU name is at hand to derive it from.
    """
    schema = load_schema()
    cfg = copy.deepcopy(dict(config))
    _check_finite(cfg)
    _schema_check(cfg, schema)

    _check_dirs(cfg)
    device = _resolve_device(cfg["device"], check=check_device)
    if not check_device and device.startswith("cuda") and cfg["tag"] == "auto":
        import torch

        if not torch.cuda.is_available():
            raise ConfigError(
                "config error at 'tag': a cluster run submitted from a host without CUDA needs "
                "an explicit tag (e.g. --config device=cuda tag=h200), so the submit host and "
                "the GPU node name the same result directory"
            )
    scale = cfg["scale"]
    if scale == "auto":
        scale = "chapter" if device.startswith("cuda") else "cpu"
    kept: dict = {}
    if scale != "chapter":
        cfg, kept = _scale_patch(cfg, schema, scale, user)

    if cfg["dtype"] == "float16" and device == "cpu":
        raise ConfigError(
            "config error at 'dtype': float16 training on the CPU is not a contract this "
            "pipeline measures (use float32 or bfloat16, or a CUDA device)"
        )
    _check_workloads(cfg)
    _check_tag(cfg)
    _check_accumulation(cfg)
    _check_compare_to(cfg)
    _check_claim_processes(cfg)
    experiments = selected_experiments(cfg["run"], _devices(device, check_device))

    from perflab.core.env import device_tag

    tag = cfg["tag"]
    if tag == "auto":
        tag = device_tag(device)
        default_scale = "chapter" if device.startswith("cuda") else "cpu"
        if scale != default_scale:
            tag += f"-{scale}"
        if cfg["workload"] != "mlp":  # another workload's results never mix with the chapter's
            tag += "-" + workload_slug(cfg["workload"])
    cfg.update(
        resolved_device=device,
        resolved_scale=scale,
        resolved_tag=tag,
        resolved_experiments=experiments,
        scale_kept=kept,
        resolved_code=user_code(cfg),
    )
    _check_experiments(cfg, device, check_device)
    return cfg


def _check_experiments(cfg: dict, device: str, check_device: bool) -> None:
    """Each experiment's own checks of its parameters (its module's ``check_config`` hook:
    W01's interventions, D01's launch), one error naming the key."""
    from perflab.experiments import ConfigProblem, ConfigView, modules

    visible = None if device.startswith("cuda") and not check_device else (
        _devices(device, True) if device.startswith("cuda") else 0)
    view = ConfigView(device=device, check_device=check_device, visible_cuda=visible,
                      selected=tuple(cfg["resolved_experiments"]),
                      contract=lambda eid: contract(cfg, eid))
    for mod in modules().values():
        hook = getattr(mod, "check_config", None)
        if hook is None:
            continue
        try:
            hook(cfg, view)
        except ConfigProblem as exc:
            raise ConfigError(f"config error at '{exc.key}': {exc.message}") from None


#: the longest workload part of a result tag (a directory name has at most 255 bytes)
SLUG_MAX = 80


def workload_slug(name: str) -> str:
    """A workload name or target as a directory-name part (``pkg.mod:fn`` -> ``pkg.mod-fn``).

    Two names never share one: where the name had to be changed beyond its ``:`` (``my model``,
    ``ä``, a trailing dot) or shortened, 8 hex digits of its hash follow, so ``my model`` and
    ``my-model`` (or ``ä`` and ``ö``) are measured into directories of their own."""
    import hashlib
    import re

    slug = re.sub(r"[^A-Za-z0-9_.-]+", "-", name).strip("-.") or "workload"
    plain = re.fullmatch(r"[A-Za-z0-9_.-]+(:[A-Za-z0-9_.-]+)?", name) is not None
    if plain and slug == name.replace(":", "-") and len(slug) <= SLUG_MAX:
        return slug
    return f"{slug[:SLUG_MAX]}-{hashlib.sha256(name.encode()).hexdigest()[:8]}"


def workload_spec(cfg: Mapping[str, Any], name: str | None = None) -> tuple[str, dict]:
    """(target, params) of a named workload; the controlled one by default."""
    name = name or cfg["workload"]
    params = dict(cfg["workloads"].get(name, {}))
    target = params.pop("target", name)
    params.setdefault("seed", cfg["seed"])
    return target, params


def user_code(cfg: Mapping[str, Any]) -> dict[str, dict]:
    """The fingerprint (perflab/core/fingerprint.py) of each configured workload that is the
    user's code, by workload name: it enters the contract of every job that builds it."""
    from perflab.core import fingerprint
    from perflab.core.targets import registered

    out = {}
    for name in sorted({cfg["workload"], *cfg["workloads"]}):
        target, params = workload_spec(cfg, name)
        if target not in registered():
            fp = fingerprint.of_target(target, canonical(params))
            if fp:
                out[name] = fp
    return out


def canonical(obj: Any) -> Any:
    """``obj`` with every mapping's keys in sorted order, recursively (lists keep theirs).

    Snakemake compares a job's params by their repr: two contracts equal in value but
    built in another key order (a config file restating a default puts its keys first)
    must not look changed and trigger a new measurement.
    """
    if isinstance(obj, Mapping):
        return {k: canonical(obj[k]) for k in sorted(obj, key=str)}
    if isinstance(obj, (list, tuple)):
        return [canonical(v) for v in obj]
    return obj


def contract(cfg: Mapping[str, Any], eid: str) -> dict:
    """The slice of the resolved config that experiment ``eid`` depends on.

    Passed to the job as its parameters, so changing anything else does not
    invalidate its result, and written into its provenance. In canonical
    (sorted) form: see :func:`canonical`.
    """
    exp = EXPERIMENTS[eid]
    names = {cfg["workload"] if w == "controlled" else w for w in exp.workloads}
    out = {
        "experiment": eid,
        "device": cfg["resolved_device"],
        "dtype": cfg["dtype"],
        "scale": cfg["resolved_scale"],
        "tag": cfg["resolved_tag"],
        "seed": cfg["seed"],
        "threads": cfg["threads"],
        "flush_denormal": (
            cfg["resolved_device"] == "cpu"
            if cfg["flush_denormal"] == "auto"
            else bool(cfg["flush_denormal"])
        ),
        "host_cores": affinity.policy_for(cfg.get("host_cores", "auto"), cfg["resolved_device"]),
        "timing": dict(cfg["timing"]),
        "workload": cfg["workload"],
        "workloads": {n: _workload_entry(cfg, n) for n in sorted(names)},
        "params": dict(cfg["experiments"].get(eid, {})),
    }
    # the sampling contract, where the user set one: the rule and this job's budget share
    # only (absent, the job runs the default rule and its contract - its cache key - is
    # unchanged; under rule fixed a share changes nothing, so it is left out)
    samp = cfg.get("sampling") or {}
    share = (samp.get("job_budget_s") or {}).get(eid)
    mine_s = {k: v for k, v in (("rule", samp.get("rule")),
                                ("job_budget_s", None if share is None
                                 or samp.get("rule") == "fixed" else {eid: share}))
              if v is not None}
    if mine_s:
        out["sampling"] = mine_s
    # the user's values a scale would have changed, where this job uses them
    mine = (f"experiments.{eid}.", "timing.", *(f"workloads.{n}." for n in names))
    kept = {k: v for k, v in cfg.get("scale_kept", {}).items()
            if k.startswith(mine) or "." not in k}
    if kept:
        out["scale_kept"] = kept
    return canonical(out)


def _workload_entry(cfg: Mapping[str, Any], name: str) -> dict:
    """A workload in a contract: its target, its parameters and, when it is the user's code,
    the fingerprint of that code (a change re-runs the job: the contract is its params)."""
    entry = dict(zip(("target", "params"), workload_spec(cfg, name)))
    code = (cfg.get("resolved_code") or {}).get(name)
    if code:
        entry["code"] = code
    return entry


#: experiments of more than one job (``own_rules``: their rules in workflow/rules/<slug>.smk):
#: E08 (a job per batch size, then the aggregation; its own replicates), E20 (a cold job,
#: then a warm one), W01 (a plan, a job per intervention, the aggregation), D01 (one job of
#: N ranks); ``claim_processes`` does not apply to them
OWN_JOBS = tuple(eid for eid, e in EXPERIMENTS.items() if e.own_rules)


def _check_claim_processes(cfg: dict) -> None:
    """``claim_processes`` names experiments of one job each, by their ids; its counts become
    numbers (``--config`` passes them as text)."""
    cfg["claim_processes"] = {k: int(v) for k, v in (cfg.get("claim_processes") or {}).items()}
    for eid in cfg["claim_processes"]:
        if eid not in EXPERIMENTS:
            raise ConfigError(f"config error at 'claim_processes.{eid}': unknown experiment "
                              f"(available: {', '.join(e for e in EXPERIMENTS if e not in OWN_JOBS)})")
        if eid in OWN_JOBS:
            raise ConfigError(f"config error at 'claim_processes.{eid}': {eid} runs as jobs of "
                              "its own shape (E08's further processes are experiments.E08."
                              "replicates); name an experiment of one job")


def process_jobs(cfg: Mapping[str, Any]) -> list[tuple[str, int]]:
    """(experiment, process number) of each further process the run makes: 2..N of each
    selected experiment ``claim_processes`` names (process 1 is the experiment's own job)."""
    want = cfg.get("claim_processes") or {}
    return [(eid, k) for eid in cfg.get("resolved_experiments", ()) if eid in want
            for k in range(2, want[eid] + 1)]


def process_outputs(cfg: Mapping[str, Any], eid: str, k: int) -> dict[str, str]:
    """The files further process ``k`` of ``eid`` writes: rows, raw samples, provenance (and
    any extras), named as its own job's with ``_p<k>``, under :data:`perflab.core.io.PROCESSES_DIR`."""
    d = result_dir(cfg) / io.PROCESSES_DIR
    return {name: str(d / Path(path).name.replace(EXPERIMENTS[eid].slug,
                                                  f"{EXPERIMENTS[eid].slug}_p{k}", 1))
            for name, path in experiment_outputs(cfg, eid).items()}


def result_dir(cfg: Mapping[str, Any]) -> Path:
    return Path(cfg["results_dir"]) / cfg["resolved_tag"]


def experiment_outputs(cfg: Mapping[str, Any], eid: str) -> dict[str, str]:
    """The files an experiment job writes: rows, raw samples, provenance (and any extras)."""
    d = result_dir(cfg)
    exp = EXPERIMENTS[eid]
    out = {
        "csv": str(d / f"{exp.slug}.csv"),
        "samples": str(d / f"{exp.slug}_samples.csv"),
        "provenance": str(d / f"{exp.slug}.json"),
    }
    for name, suffix in exp.extra_outputs:
        out[name] = str(d / f"{exp.slug}{suffix}")
    return out


def result_files(cfg: Mapping[str, Any], eids: list[str]) -> list[str]:
    """Every file the experiments ``eids`` leave in the result directory.

    Asked for as targets: Snakemake does not re-make a missing file whose consumers (the
    ledger, the diagnosis) are up to date, so a deleted result would never be re-measured."""
    further = [process_outputs(cfg, e, k) for e, k in process_jobs(cfg) if e in eids]
    return [f for out in [*(experiment_outputs(cfg, e) for e in eids), *further]
            for f in out.values()]


def figure_outputs(cfg: Mapping[str, Any], eid: str) -> dict[str, str]:
    """An experiment's figure and its report caption, as the figures job writes them."""
    d = Path(cfg["figures_dir"]) / cfg["resolved_tag"]
    slug = EXPERIMENTS[eid].slug
    return {"png": str(d / f"{slug}.png"), "caption": str(d / "captions" / f"{slug}.rst")}


def figure_plan(cfg: Mapping[str, Any], eids: list[str]) -> list[dict[str, str]]:
    """What the figures job draws: per experiment, its rows, samples, PNG and caption."""
    plan = []
    for eid in eids:
        rows = experiment_outputs(cfg, eid)
        plan.append({"eid": eid, "csv": rows["csv"], "samples": rows["samples"],
                     **figure_outputs(cfg, eid)})
    return plan


def load(configfiles: list[str | Path] | None = None, overrides: Mapping[str, Any] | None = None) -> dict:
    """Read config/config.yaml, merge further files and overrides, and resolve."""
    user = user_layer(list(configfiles or []), overrides)
    return resolve(deep_merge(load_yaml(DEFAULT_CONFIG), user), user=user)
