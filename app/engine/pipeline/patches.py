"""Config patches: compute values, render them in the target dialect, diff the user's config.

One typed representation (``app.engine.models.Patch``) renders four ways:
- ``yaml``: a nested snippet, or applied to the user's YAML with comments and key order kept;
- ``hydra``: a dotted override (``a.b=v``, ``+a.b=v`` for a key the config lacks, ``~a.b``);
- ``cli``: an argparse flag edit; applied in place to a launch script given as ``--config``;
- ``env``: ``export`` lines, plus a Ray ``runtime_env`` ``env_vars`` block in reports.
"""

from __future__ import annotations

import difflib
import io
import json
import math
import shlex
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import regex

from app.engine.models import Patch
from app.engine.pipeline.expr import ExprError, Missing, Scope, holds, render_template
from app.engine.pipeline.library import PatchSpec, PatchTarget
from app.errors import ConfigFileError

_FLAG = regex.compile(
    r"(?<![\w-])(--[A-Za-z][\w-]*)(?:[ \t]*=[ \t]*|[ \t]+(?:\\\n[ \t]*)?)?([^\s\\-][^\s\\]*)?"
)


def _yaml() -> Any:
    from ruamel.yaml import YAML

    y = YAML(typ="rt")
    y.preserve_quotes = True
    y.width = 4096
    return y


@dataclass
class ConfigView:
    """The job's own config: a YAML mapping, or a launch script with ``--flags``."""

    name: str
    text: str
    kind: str  # "yaml" | "script"
    doc: Any = None  # ruamel CommentedMap for yaml
    flags: dict[str, str] | None = None

    @classmethod
    def load(cls, path: Path) -> ConfigView:
        try:
            text = path.read_text(encoding="utf-8", errors="replace")
        except OSError as exc:
            raise ConfigFileError(f"{path}: cannot read config ({exc.strerror})") from None
        return cls.from_text(text, name=str(path))

    @classmethod
    def from_text(cls, text: str, *, name: str) -> ConfigView:
        suffix = Path(name).suffix.lower()
        if suffix in (".sh", ".bash", ".slurm", ".sbatch"):
            return cls(name=name, text=text, kind="script", flags=_parse_flags(text))
        err: Exception | None = None
        try:
            doc = _yaml().load(text)
        except Exception as exc:  # ruamel raises many types; all mean "not parseable YAML"
            doc, err = None, exc
        if isinstance(doc, dict):
            return cls(name=name, text=text, kind="yaml", doc=doc)
        if suffix not in (".yaml", ".yml") and _FLAG.search(text):
            return cls(name=name, text=text, kind="script", flags=_parse_flags(text))
        why = f" ({err})" if err else ""
        raise ConfigFileError(f"{name}: neither a YAML mapping nor a launch script with --flags{why}")

    def get_path(self, path: list[str]) -> Any:
        if self.kind == "script":
            if len(path) == 1 and self.flags is not None:
                return _typed(self.flags.get(path[0]) or self.flags.get(_flag_of(path[0])))
            return None
        node: Any = self.doc
        for seg in path:
            if not isinstance(node, dict) or seg not in node:
                return None
            node = node[seg]
        return _plain(node)

    def find_leaf(self, name: str) -> Any:
        """A bare name: a flag of that name, or the one YAML key of that name anywhere."""
        if self.kind == "script":
            assert self.flags is not None
            raw = self.flags.get(_flag_of(name))
            return _typed(raw) if raw is not None else None
        found: list[Any] = []

        def walk(node: Any) -> None:
            if isinstance(node, dict):
                for k, v in node.items():
                    if k == name and not isinstance(v, dict | list):
                        found.append(_plain(v))
                    walk(v)
            elif isinstance(node, list):
                for v in node:
                    walk(v)

        walk(self.doc)
        distinct = {json.dumps(v, sort_keys=True, default=str) for v in found}
        return found[0] if len(distinct) == 1 else None

    def has_path(self, path: list[str]) -> bool:
        return self.get_path(path) is not None


def _flag_of(name: str) -> str:
    return "--" + name.replace("_", "-")


def _parse_flags(text: str) -> dict[str, str]:
    joined = text.replace("\\\n", " ")
    flags: dict[str, str] = {}
    for line in joined.splitlines():
        stripped = line.strip()
        if stripped.startswith("#"):
            continue
        try:
            tokens = shlex.split(stripped, comments=True)
        except ValueError:
            tokens = stripped.split()
        for i, tok in enumerate(tokens):
            if not tok.startswith("--"):
                continue
            key, eq, val = tok.partition("=")
            if eq:
                flags[key] = val
            elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                flags[key] = tokens[i + 1]
            else:
                flags[key] = "true"
    return flags


def _typed(raw: str | None) -> Any:
    if raw is None:
        return None
    for conv in (int, float):
        try:
            return conv(raw)
        except ValueError:
            pass
    return raw


def _plain(v: Any) -> Any:
    if isinstance(v, bool | int | float | str) or v is None:
        return v
    if isinstance(v, dict):
        return {str(k): _plain(x) for k, x in v.items()}
    if isinstance(v, list):
        return [_plain(x) for x in v]
    return str(v)


# --- computing ------------------------------------------------------------------------


def for_detected(declared: Sequence[str], detected: Sequence[str]) -> bool:
    """Whether a patch or step written for `declared` frameworks (none: general) applies to a log
    of the `detected` ones: a flag of a framework the job does not run costs the user more than
    no advice (name the framework, `--framework`, to see its dialect)."""
    return not declared or bool(set(declared) & set(detected))


def select_specs(specs: Iterable[PatchSpec], frameworks: Sequence[str]) -> list[PatchSpec]:
    """The detected frameworks' own dialects plus the general remedies (`for_detected`)."""
    return [s for s in specs if for_detected(s.frameworks, frameworks)]


def _invalid(spec: PatchSpec, value: Any, scope: Scope) -> str | None:
    """Why a computed value must not be offered, or None when it may."""
    if isinstance(value, float) and not math.isfinite(value):
        return f"the computed value {value} is not a number"
    if not spec.valid:
        return None
    checked = Scope(captures={**dict(scope.captures), "value": value}, facts=scope.facts, config=scope.config)
    try:
        ok = render_template("{" + spec.valid + "}", checked)
    except Missing:
        return None  # the check needs a value the log does not state: the patch says so itself
    except (ExprError, TypeError, ValueError, ZeroDivisionError) as exc:
        return f"its check failed ({exc})"
    return None if ok else f"the computed value {value!r} fails `{spec.valid}`"


def compute_patches(
    specs: Iterable[PatchSpec], *, scope: Scope, config: ConfigView | None
) -> tuple[list[Patch], list[str]]:
    out: list[Patch] = []
    problems: list[str] = []
    for spec in specs:
        try:
            if not holds(spec.when, scope):
                continue
        except ExprError as exc:
            problems.append(f"patch {'.'.join(spec.path)}: `when` failed: {exc}")
            continue
        value: Any = None
        computed, note = True, None
        if spec.value is not None:
            try:
                value = render_template(spec.value, scope) if isinstance(spec.value, str) else spec.value
            except Missing as miss:
                computed = False
                note = f"needs `{miss.name}`, which neither the log nor the config states; pass --config"
            except (ExprError, TypeError, ValueError, ZeroDivisionError) as exc:
                computed = False
                note = f"value could not be computed ({exc})"
        if computed and spec.value is not None:
            bad = _invalid(spec, value, scope)
            if bad:
                problems.append(f"patch {'.'.join(spec.path)} not offered: {bad}")
                continue
        patch = Patch(
            target=spec.target.value,
            path=list(spec.path),
            op=spec.op.value,
            value=value,
            why=spec.why,
            framework=spec.frameworks[0] if len(spec.frameworks) == 1 else None,
            computed=computed,
            note=note,
            rendered="",
        )
        patch.rendered = render_patch(patch, config=config)
        out.append(patch)
    return out, problems


# --- rendering ------------------------------------------------------------------------


def _scalar(v: Any, *, dialect: str) -> str:
    if v is None:
        return "<?>"
    if isinstance(v, bool):
        return "true" if dialect == "yaml" else "True" if dialect == "hydra" else str(v).lower()
    if isinstance(v, float) and v.is_integer() and abs(v) < 1e15:
        return str(int(v)) if dialect != "yaml" else str(v)
    if isinstance(v, list | dict):
        return json.dumps(v)
    return str(v)


def render_patch(p: Patch, *, config: ConfigView | None = None) -> str:
    val = None if not p.computed else p.value
    if p.target == "yaml":
        if p.op == "unset":
            return f"# remove `{'.'.join(p.path)}`"
        v = val if p.op == "set" else p.op == "flag_on"
        lines = []
        for depth, seg in enumerate(p.path[:-1]):
            lines.append("  " * depth + f"{seg}:")
        lines.append("  " * (len(p.path) - 1) + f"{p.path[-1]}: {_yaml_scalar(v)}")
        return "\n".join(lines)
    if p.target == "hydra":
        dotted = ".".join(p.path)
        if p.op == "unset":
            return f"~{dotted}"
        v = val if p.op == "set" else p.op == "flag_on"
        plus = "+" if config is not None and config.kind == "yaml" and not config.has_path(p.path) else ""
        return f"{plus}{dotted}={_scalar(v, dialect='hydra')}"
    if p.target == "cli":
        flag = p.path[-1]
        if p.op in ("unset", "flag_off"):
            return f"remove {flag}"
        if p.op == "flag_on":
            return flag
        return f"{flag} {shlex.quote(_scalar(val, dialect='cli'))}"
    var = p.path[-1]
    if p.op in ("unset", "flag_off"):
        return f"unset {var}"
    v = val if p.op == "set" else "1"
    return f"export {var}={shlex.quote(_scalar(v, dialect='env'))}"


def _yaml_scalar(v: Any) -> str:
    if v is None:
        return "<?>"
    buf = io.StringIO()
    y = _yaml()
    y.dump(v, buf)
    text = buf.getvalue().strip()
    return text.removesuffix("\n...").removesuffix("...").strip()


# What shows a job running on Ray: Ray's own lines (detected as `ray`, rules/frameworks.yaml: its
# worker prefixes, raylet, ray.exceptions), or a framework that runs only on Ray (slime, ROLL,
# ChatLearn). Not verl or OpenRLHF by name: verl's SFT trainer runs under torchrun and OpenRLHF's
# SFT/DPO under deepspeed, so only their Ray lines say that their workers are Ray actors.
RAY_BASED = frozenset({"ray", "roll", "slime", "chatlearn"})


def runs_on_ray(frameworks: Iterable[str]) -> bool:
    """Whether the detected frameworks show the job on Ray (its workers Ray actors, an env var
    reaching them through a runtime_env and their logs in Ray's session folders)."""
    return bool(RAY_BASED & set(frameworks))


def ray_env_block(patches: Iterable[Patch], *, frameworks: Iterable[str]) -> str | None:
    """The env patches as a Ray `runtime_env`, for a job the log shows running on Ray (a Ray
    block in the report of a plain torchrun or DeepSpeed job is advice for another stack)."""
    if not runs_on_ray(frameworks):
        return None
    env = {
        p.path[-1]: _scalar(p.value, dialect="env") for p in patches if p.target == "env" and p.op == "set"
    }
    if not env:
        return None
    return "runtime_env = " + json.dumps({"env_vars": env}, indent=2)


# --- applying to the user's config -----------------------------------------------------


def config_diff(config: ConfigView, patches: Iterable[Patch]) -> str | None:
    patches = [p for p in patches if p.computed or p.op != "set"]
    new = _apply_yaml(config, patches) if config.kind == "yaml" else _apply_script(config, patches)
    if new is None or new == config.text:
        return None
    diff = difflib.unified_diff(
        config.text.splitlines(keepends=True),
        new.splitlines(keepends=True),
        fromfile=f"a/{Path(config.name).name}",
        tofile=f"b/{Path(config.name).name}",
    )
    return "".join(diff)


def _apply_yaml(config: ConfigView, patches: list[Patch]) -> str | None:
    y = _yaml()
    doc = y.load(config.text)  # fresh copy: the view stays as the user wrote it
    changed = False
    for p in patches:
        if p.target not in (PatchTarget.yaml.value, PatchTarget.hydra.value):
            continue
        node = doc
        for seg in p.path[:-1]:
            if seg not in node or not isinstance(node[seg], dict):
                from ruamel.yaml.comments import CommentedMap

                node[seg] = CommentedMap()
            node = node[seg]
        key = p.path[-1]
        if p.op == "unset":
            if key in node:
                del node[key]
                changed = True
            continue
        value = p.value if p.op == "set" else p.op == "flag_on"
        if node.get(key) != value:
            node[key] = value
            changed = True
    if not changed:
        return None
    out = io.StringIO()
    y.dump(doc, out)
    return out.getvalue()


_RAY_SUBMIT = regex.compile(r"ray\s+job\s+submit\b")
_RUNTIME_ENV = regex.compile(r"--runtime-env-json[= ]+(?P<q>['\"])(?P<json>.*?)(?P=q)", regex.S)


def _apply_script(config: ConfigView, patches: list[Patch]) -> str | None:
    text = config.text
    exports: list[str] = []
    env: dict[str, str] = {}
    for p in patches:
        if p.target == "cli":
            text = _edit_flag(text, p)
        elif p.target == "env" and p.op == "set":
            env[p.path[-1]] = _scalar(p.value, dialect="env")
            exports.append(p.rendered)
        elif p.target == "env":
            exports.append(p.rendered)
    if env and _RAY_SUBMIT.search(text):
        # An `export` in the submitting shell never reaches Ray's workers: use the job's
        # runtime_env instead, merged into one the script already passes.
        return _ray_runtime_env(text, env)
    if exports:
        lines = text.splitlines(keepends=True)
        at = 1 if lines and lines[0].startswith("#!") else 0
        lines[at:at] = [e + "\n" for e in exports]
        text = "".join(lines)
    return text


def _ray_runtime_env(text: str, env: dict[str, str]) -> str:
    m = _RUNTIME_ENV.search(text)
    if m:
        try:
            current = json.loads(m.group("json"))
        except ValueError:
            current = None
        if isinstance(current, dict):
            current.setdefault("env_vars", {}).update(env)
            return text[: m.start()] + f"--runtime-env-json='{json.dumps(current)}'" + text[m.end() :]
    submit = _RAY_SUBMIT.search(text)
    assert submit is not None
    flag = f" --runtime-env-json='{json.dumps({'env_vars': env})}'"
    return text[: submit.end()] + flag + text[submit.end() :]


def _edit_flag(text: str, p: Patch) -> str:
    flag = p.path[-1]
    pat = regex.compile(
        rf"(?<![\w-]){regex.escape(flag)}(?![\w-])(?:[ \t]*=[ \t]*|[ \t]+)?(?P<val>[^\s\\-][^\s\\]*)?"
    )
    m = pat.search(text)
    if p.op in ("unset", "flag_off"):
        return pat.sub("", text, count=1) if m else text
    if p.op == "flag_on":
        return text if m else _append_arg(text, flag)
    new = f"{flag} {shlex.quote(_scalar(p.value, dialect='cli'))}"
    if m:
        return text[: m.start()] + new + text[m.end() :]
    return _append_arg(text, new)


def _append_arg(text: str, arg: str) -> str:
    """Add an argument to the last command line (after a trailing backslash chain)."""
    lines = text.rstrip("\n").splitlines()
    for i in range(len(lines) - 1, -1, -1):
        if lines[i].strip() and not lines[i].lstrip().startswith("#"):
            lines[i] = lines[i].rstrip() + f" {arg}"
            break
    return "\n".join(lines) + "\n"
