"""bench/gitleaks_samples.py: the Go subset it evaluates, on a made-up rule file laid out like
gitleaks' generator (nothing of gitleaks is used here)."""

from __future__ import annotations

import random
import sys
from pathlib import Path

import regex

from tests.conftest import ROOT

sys.path.insert(0, str(ROOT / "bench"))

import gitleaks_samples  # bench/ is not a package

GENERATE = """package utils

func GenerateSampleSecret(identifier string, secret string) string {
	return fmt.Sprintf("%s_secret = '%s'", identifier, secret)
}

func GenerateSampleSecrets(identifier string, secret string) []string {
	samples := map[string]string{
		// a comment, then two templates
		"env":  "{I}_TOKEN={s}",
		"yaml": `{i}_token: "{s}"`,
	}
	return nil
}
"""

PATTERNS = """package utils

func Hex(size string) string {
	return fmt.Sprintf(`[a-f0-9]{%s}`, size)
}
"""

RULE = """package rules

func Demo() *config.Rule {
	r := config.Rule{
		RuleID: "demo-token",
		Regex:  regexp.MustCompile(`demo_[a-f0-9]{20}`),
	}
	tps := utils.GenerateSampleSecrets("demo", "demo_"+secrets.NewSecret(utils.Hex("20")))
	tps = append(tps,
		`literal = "demo_0123456789abcdef0123"`,
		fmt.Sprintf("x=%s", secrets.NewSecret(`[A-Z]{4}`)),
		someHelperWeDoNotModel(),
	)
	fps := []string{"demo_xxxxxxxxxxxxxxxxxxxx", strings.Repeat("a", 3)}
	return utils.Validate(r, tps, fps)
}

func NotARule() {}
"""


def _checkout(tmp: Path) -> Path:
    base = tmp / "cmd" / "generate" / "config"
    (base / "utils").mkdir(parents=True)
    (base / "rules").mkdir()
    (base / "utils" / "generate.go").write_text(GENERATE)
    (base / "utils" / "patterns.go").write_text(PATTERNS)
    (base / "rules" / "demo.go").write_text(RULE)
    return tmp


def test_rule_examples_are_evaluated(tmp_path: Path) -> None:
    (rs,) = gitleaks_samples.load(_checkout(tmp_path))
    assert rs.rule == "demo-token" and rs.source == "demo.go"
    texts = [s.text for s in rs.tps]
    assert len(texts) == 4 and rs.skipped == 1  # two templates, a literal, a Sprintf; a helper skipped
    env = next(t for t in texts if t.startswith("DEMO_TOKEN="))
    assert regex.fullmatch(r"DEMO_TOKEN=demo_[a-f0-9]{20}", env)
    assert any(regex.fullmatch(r'demo_token: "demo_[a-f0-9]{20}"', t) for t in texts)
    assert 'literal = "demo_0123456789abcdef0123"' in texts
    assert any(regex.fullmatch(r"x=[A-Z]{4}", t) for t in texts)
    # the generated parts are known: that is what must not survive redaction
    templ = next(s for s in rs.tps if s.text == env)
    assert len(templ.frags) == 1 and templ.frags[0] in env and len(templ.frags[0]) == 20
    assert [s.text for s in rs.fps] == ["demo_xxxxxxxxxxxxxxxxxxxx", "aaa"]


def test_random_match_fits_its_regex() -> None:
    rng = random.Random(1)
    for pattern in [
        r"ghp_[0-9a-zA-Z]{36}",
        r"(?:sk|rk)_(?:test|live)_[a-z0-9]{10,20}",
        r"[\w~.]{3}\dQ~[\w~.-]{31,34}",
    ]:
        for _ in range(20):
            assert regex.fullmatch(pattern, gitleaks_samples.random_match(pattern, rng))
