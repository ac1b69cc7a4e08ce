"""`logtriage`: the offline command line.

Exit codes: 0 the command ran (whatever the analysis found), 1 unreadable input or a failed
check, 2 usage. Errors are one line on stderr, never a traceback.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from app.errors import LogtriageError, UsageError, disk_full, is_disk_full

Handler = Callable[[argparse.Namespace], int]


def _size(text: str) -> int:
    units = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
    t = text.strip().lower().removesuffix("b").removesuffix("i")
    num, unit = (t[:-1], t[-1]) if t and t[-1] in units else (t, "")
    try:
        return int(float(num) * units[unit])
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a size: {text!r} (e.g. 500M, 20G, 0)") from None


def _compiled(args: argparse.Namespace):  # type: ignore[no-untyped-def]
    from app.engine.pipeline.library import load_library
    from app.engine.pipeline.scan import CompiledLibrary
    from app.engine.pipeline.triage import default_cache_dir
    from app.scan_settings import scan_settings

    settings = scan_settings()
    rules_dir = getattr(args, "rules", None) or settings.rules_dir
    cache_dir = settings.cache_dir or default_cache_dir()
    library = load_library(Path(rules_dir) if rules_dir else None, cache_dir=cache_dir)
    extra = []
    n_extra = getattr(args, "extra_synthetic_rules", 0) or 0
    if n_extra:
        from app.engine.ruledev.synthetic import synthetic_rules

        extra = synthetic_rules(n_extra)
    packs = [*settings.rule_packs, *(Path(p) for p in getattr(args, "pack", None) or [])]
    if packs:
        from app.engine.pipeline.library import SitePack, load_pack_dirs

        entries, classes = load_pack_dirs(packs)
        library = library.with_pack(SitePack.build(entries, base=library, classes=classes))
    engine = getattr(args, "engine", None) or settings.engine
    return CompiledLibrary(library, engine=engine, cache_dir=cache_dir, extra_rules=extra)


def cmd_analyze(args: argparse.Namespace) -> int:
    from app.engine.pipeline.ingest import collect_sources
    from app.engine.pipeline.patches import ConfigView
    from app.engine.pipeline.triage import TriageOptions, triage
    from app.render.markdown import render_markdown
    from app.render.text import render_text
    from app.scan_settings import scan_settings

    settings = scan_settings()
    sources, warnings = collect_sources(args.paths)
    config = ConfigView.load(Path(args.config)) if args.config else None
    compiled = _compiled(args)
    # start-up is over (main() turned the cyclic collector off for it): what it built lives as
    # long as the process, so it is frozen out of the collector's reach before the scan
    gc.freeze()
    gc.enable()
    max_bytes = settings.max_bytes if args.max_bytes is None else args.max_bytes
    options = TriageOptions(
        jobs=args.jobs if args.jobs is not None else settings.scan_jobs,
        max_bytes=max_bytes,
        framework=args.framework,
        exit_code=args.exit_code,
    )
    analysis = triage(sources=sources, compiled=compiled, options=options, config=config, warnings=warnings)
    out: TextIO = open(args.output, "w", encoding="utf-8") if args.output else sys.stdout  # noqa: SIM115
    try:
        if args.format == "json":
            out.write(analysis.model_dump_json(indent=2) + "\n")
        elif args.format == "markdown":
            out.write(render_markdown(analysis))
        else:
            colour = args.color == "always" or (
                args.color == "auto" and out.isatty() and "NO_COLOR" not in os.environ
            )
            out.write(render_text(analysis, colour=colour))
    finally:
        if out is not sys.stdout:
            out.close()
    return 0


def cmd_rules_list(args: argparse.Namespace) -> int:
    from app.engine.pipeline.library import load_library

    lib = load_library(Path(args.rules) if args.rules else None)
    rows = sorted(lib.rules, key=lambda lr: (lr.rule.failure_class, lr.rule.id))
    if args.json:
        print(json.dumps([_rule_summary(lr.rule) for lr in rows], indent=2))
        return 0
    print(f"rule library {lib.version}: {len(rows)} rules")
    for lr in rows:
        r = lr.rule
        fw = ",".join(r.frameworks) or "any"
        print(f"{r.id:44} v{r.version:<2} {r.status.value:12} {r.severity.value:8} {r.failure_class:34} {fw}")
    return 0


def _rule_summary(rule) -> dict[str, object]:  # type: ignore[no-untyped-def]
    return {
        "id": rule.id,
        "version": rule.version,
        "status": rule.status.value,
        "failure_class": rule.failure_class,
        "severity": rule.severity.value,
        "title": rule.title,
        "frameworks": rule.frameworks,
    }


def cmd_rules_show(args: argparse.Namespace) -> int:
    from app.engine.pipeline.library import load_library
    from app.errors import NotFoundError

    lib = load_library(Path(args.rules) if args.rules else None)
    lr = lib.get(args.id)
    if lr is None:
        raise NotFoundError(f"no rule {args.id!r}; `logtriage rules list` shows the ids")
    sys.stdout.write(lr.text)
    fixtures = ", ".join(f.name for f in lr.fixtures) or "none"
    print(f"# file: {lr.path}\n# fixtures: {fixtures}")
    return 0


def cmd_rules_test(args: argparse.Namespace) -> int:
    from app.engine.ruledev.ruletest import run_all

    compiled = _compiled(args)
    results = run_all(compiled)
    if args.pack:  # a site pack's own fixtures, and the healthy baseline with it
        mine = {str(Path(p).resolve()) for p in args.pack}
        results = [
            r
            for r in results
            if r.rule_id == "_baseline"
            or any(
                str(lr.path.resolve()).startswith(tuple(mine))
                for lr in [compiled.library.get(r.rule_id)]
                if lr is not None
            )
        ]
    failed = [r for r in results if not r.ok]
    for r in results:
        if not r.ok or args.verbose:
            mark = "ok  " if r.ok else "FAIL"
            print(f"{mark} {r.rule_id:44} {r.fixture}  {r.detail}")
    print(f"{len(results) - len(failed)} passed, {len(failed)} failed")
    return 1 if failed else 0


def cmd_rules_lint(args: argparse.Namespace) -> int:
    from app.engine.pipeline.library import load_library
    from app.engine.ruledev.ruletest import baseline_files, lint

    lib = load_library(Path(args.rules) if args.rules else None)
    sample = b"".join(p.read_bytes() for p in baseline_files(lib))
    if sample:
        sample = sample * max(1, (4 << 20) // len(sample))
    issues, costs = lint(lib, cost_sample=sample or None)
    for i in issues:
        print(f"{i.level:7} {i.rule_id}: {i.message}")
    if args.costs and costs:
        print("scan cost per rule (x a literal pattern, on the baseline logs):")
        for rid, c in sorted(costs.items(), key=lambda kv: -kv[1]):
            print(f"  {c:6.2f}  {rid}")
    errors = [i for i in issues if i.level == "error"]
    print(f"{len(lib.rules)} rules, {len(errors)} errors, {len(issues) - len(errors)} warnings")
    return 1 if errors else 0


def cmd_rules_export(args: argparse.Namespace) -> int:
    from app.engine.ruledev.export import to_grep_patterns

    if args.format == "pack":
        from app.service import runtime
        from app.service.drafts import export_pack
        from app.settings import get_settings

        if not args.out:
            raise UsageError("--format pack writes a directory: give --out DIR")
        written = export_pack(runtime.open_database(get_settings()), out=Path(args.out))
        rules = sum(1 for p in written if p.suffix == ".yaml" and p.name != "classes.yaml")
        print(
            f"{rules} site rule(s) with their fixtures in {args.out}; "
            f"test them: logtriage rules test --pack {args.out}"
        )
        return 0
    compiled = _compiled(args)
    if args.format == "grep":
        for pat in to_grep_patterns(compiled, include_all=args.all):
            print(pat)
    else:
        from app.engine.pipeline.library import Rule

        print(json.dumps(Rule.model_json_schema(by_alias=True), indent=2))
    return 0


def cmd_rules_catalog(args: argparse.Namespace) -> int:
    from app.engine.pipeline.library import load_library
    from app.engine.ruledev.catalog import render_catalog

    sys.stdout.write(render_catalog(load_library(Path(args.rules) if args.rules else None)))
    return 0


def cmd_eval(args: argparse.Namespace) -> int:
    if args.site:
        return _eval_site(args)
    from app.engine.ruledev.evaluation import evaluate_corpus, format_report

    compiled = _compiled(args)
    report = evaluate_corpus(compiled, Path(args.corpus), split=args.split)
    if args.json:
        print(json.dumps(report.as_dict(), indent=2))
    else:
        print(format_report(report))
    if args.min_accuracy is not None and report.accuracy < args.min_accuracy:
        print(f"accuracy {report.accuracy:.3f} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


def _eval_site(args: argparse.Namespace) -> int:
    """The site's own evaluation set: its analyses that people gave a verdict on."""
    from types import SimpleNamespace

    from app.service import runtime
    from app.service.access import ALL_SCOPES, Principal
    from app.service.learn import feedback_summary
    from app.settings import get_settings

    ctx = SimpleNamespace(db=runtime.open_database(get_settings()))
    out = feedback_summary(ctx, principal=Principal(None, "cli", ALL_SCOPES))  # type: ignore[arg-type]
    if args.json:
        print(json.dumps(out, indent=2))
    else:
        if not out["labelled"]:
            print("no labelled analyses yet: a verdict (Correct, or Wrong with the right class) labels one")
        else:
            print(f"site history: {out['labelled']} labelled analyses, top-1 {out['accuracy']:.1%}")
            for m in out["months"]:
                print(f"  {m['month']}  {m['right']:5} / {m['labelled']:<5} {m['accuracy']:.1%}")
        flagged = [r for r in out["rules"] if r["flagged"]]
        for r in flagged:
            print(
                f"rule {r['rule_id']}: precision {r['precision']:.0%} "
                f"({r['correct']} correct, {r['wrong']} wrong)"
            )
        for p_ in out["proposals"]:
            print(f"proposal: {p_['why']}")
    if args.min_accuracy is not None and (out["accuracy"] or 0.0) < args.min_accuracy:
        print(f"accuracy {out['accuracy']} is below --min-accuracy {args.min_accuracy}", file=sys.stderr)
        return 1
    return 0


def build_parser(*, only: str | None = None) -> argparse.ArgumentParser:
    """The whole command line; `only="analyze"` builds that command's parser alone (the same
    options, help and errors): the other commands' ~150 arguments cost a one-line analysis a
    tenth of its start-up."""
    p = argparse.ArgumentParser(
        prog="logtriage",
        description="Find the root cause of a failed RL/LLM training job in its logs, and the fix.",
    )
    sub = p.add_subparsers(dest="command", metavar="COMMAND")

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--rules", help="rule library directory (default: bundled rules/)")
        sp.add_argument("--engine", choices=["auto", "hyperscan", "regex"], help="scan engine")
        sp.add_argument("--extra-synthetic-rules", type=int, default=0, help=argparse.SUPPRESS)
        sp.add_argument(
            "--pack",
            action="append",
            metavar="DIR",
            help="a site rule pack directory added to the library (repeatable; also LOGTRIAGE_RULE_PACKS)",
        )

    a = sub.add_parser("analyze", help="analyse log files, directories or - (stdin)")
    a.add_argument("paths", nargs="+", metavar="LOG", help="log files (plain, gzip, zstd), directories, or -")
    a.add_argument("--config", help="the job's config (YAML) or launch script: patches become a diff of it")
    a.add_argument("--format", choices=["text", "json", "markdown"], default="text")
    a.add_argument("--framework", choices=list(_frameworks()), help="override framework detection")
    a.add_argument("--exit-code", type=int, help="the job's reported exit status (0 + fatal error = masked)")
    a.add_argument("--jobs", type=int, help="scan processes (default: one per core for large files)")
    a.add_argument(
        "--max-bytes", type=_size, help="largest input after decompression, e.g. 20G (0 = no limit)"
    )
    a.add_argument("--color", choices=["auto", "always", "never"], default="auto")
    a.add_argument("-o", "--output", help="write the report to a file")
    common(a)
    a.set_defaults(func=cmd_analyze)
    if only == "analyze":
        return p

    r = sub.add_parser("rules", help="the rule library: list, show, test, lint, export, catalog")
    rsub = r.add_subparsers(dest="rules_command", metavar="ACTION")
    rl = rsub.add_parser("list", help="list rules")
    rl.add_argument("--json", action="store_true")
    rs = rsub.add_parser("show", help="show one rule's YAML")
    rs.add_argument("id")
    rt = rsub.add_parser("test", help="run every rule's fixtures and the baseline")
    rt.add_argument("-v", "--verbose", action="store_true")
    rli = rsub.add_parser("lint", help="validate rules, fixtures and scan cost")
    rli.add_argument("--costs", action="store_true", help="print each rule's scan cost")
    rc = rsub.add_parser("catalog", help="the rule catalogue as markdown (docs/rule-catalog.md)")
    re_ = rsub.add_parser("export", help="export patterns (grep), the rule JSON schema, or the site pack")
    re_.add_argument(
        "--format",
        choices=["grep", "schema", "pack"],
        default="grep",
        help="pack: the service's site rule pack as rule files with fixtures (--out DIR)",
    )
    re_.add_argument("--out", help="the directory --format pack writes")
    re_.add_argument("--all", action="store_true", help="also facts and framework detectors")
    for sp, fn in (
        (rl, cmd_rules_list),
        (rs, cmd_rules_show),
        (rt, cmd_rules_test),
        (rli, cmd_rules_lint),
        (re_, cmd_rules_export),
        (rc, cmd_rules_catalog),
    ):
        common(sp)
        sp.set_defaults(func=fn)

    e = sub.add_parser("eval", help="accuracy on the labelled corpus")
    e.add_argument("--corpus", default="tests/corpus", help="corpus directory with manifest.yaml")
    e.add_argument("--json", action="store_true")
    e.add_argument("--split", help="only one part of the corpus (real, public)")
    e.add_argument("--min-accuracy", type=float, help="exit 1 when top-1 accuracy is below this")
    e.add_argument(
        "--site",
        action="store_true",
        help="the service's own labelled history instead (analyses people gave a verdict on)",
    )
    common(e)
    e.set_defaults(func=cmd_eval)

    from app.service_cli import register

    register(sub)
    return p


def _frameworks() -> Sequence[str]:
    from app.engine.pipeline.framework_names import FRAMEWORK_NAMES  # not the library: --help stays fast

    return FRAMEWORK_NAMES


def main(argv: Sequence[str] | None = None) -> int:
    # pydantic looks for plugins in every installed distribution's entry points when it builds
    # its first model (5-9 ms of each start here); logtriage uses none. One set on purpose wins.
    os.environ.setdefault("PYDANTIC_DISABLE_PLUGINS", "__all__")
    argv = sys.argv[1:] if argv is None else list(argv)
    # start-up allocates ~100k objects that live as long as the process (modules, the rule
    # library): collections walking them meanwhile are wasted work. `analyze` turns the
    # collector back on once its library is loaded; every command has it back when it returns.
    gc.disable()
    try:
        return _run(argv)
    finally:
        gc.enable()


def _run(argv: list[str]) -> int:
    parser = build_parser(only="analyze" if argv[:1] == ["analyze"] else None)
    args = parser.parse_args(argv)
    func: Handler | None = getattr(args, "func", None)
    if func is None:
        parser.print_help(sys.stderr)
        return 2
    if func is not cmd_analyze:
        gc.enable()
    try:
        return func(args)
    except UsageError as exc:
        print(f"logtriage: {exc.detail}", file=sys.stderr)
        return exc.exit_code
    except LogtriageError as exc:
        print(f"logtriage: error: {exc.detail}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        return 130
    except BrokenPipeError:
        # `logtriage analyze big.log | head`: stop quietly like other Unix tools.
        sys.stderr.close()
        return 0
    except OSError as exc:  # after BrokenPipeError, an OSError too
        if not is_disk_full(exc):  # ENOSPC/EDQUOT: InsufficientStorageError's exit code (3)
            raise
        err = disk_full(exc)
        print(f"logtriage: error: {err.detail}", file=sys.stderr)
        return err.exit_code


if __name__ == "__main__":
    sys.exit(main())
