"""manage.py compare_releases: a readable table, and an exit status CI can act on."""

from __future__ import annotations

import subprocess
import sys
from io import StringIO

import pytest
from django.conf import settings
from django.core.management import CommandError, call_command

from tests.releases.conftest import make_release

pytestmark = pytest.mark.django_db


def run(*args):
    out = StringIO()
    call_command("compare_releases", *args, stdout=out)
    return out.getvalue()


def test_prints_a_table_naming_the_slower_step(two_releases):
    text = run("v1", "v2")
    assert "v1 → v2 in project acme" in text
    assert "checkout" in text and "regressed" in text
    steps = text.split("Where it changed")[1].splitlines()
    assert steps[3].startswith("* tool:fetch_invoice")
    assert "repeated_tool_call went from 5% to 20% of tasks" in text
    assert "Calls got slower: tool:fetch_invoice" in text


def test_fail_on_regression_exits_1_above_the_threshold_and_0_below(two_releases):
    with pytest.raises(CommandError) as err:
        run("v1", "v2", "--fail-on-regression", "10")
    assert err.value.returncode == 1 and "checkout" in str(err.value)
    below = run("v1", "v2", "--fail-on-regression", "1000")
    checkout = next(line for line in below.splitlines() if line.startswith("checkout"))
    assert checkout.endswith("slower")


def verdict(text: str, task: str) -> str:
    return next(line for line in text.splitlines() if line.startswith(task)).split()[-1]


def test_no_flag_never_fails_and_an_improvement_does_not_fail(two_releases):
    # Without the flag the regression is reported, and the command still returns normally.
    assert verdict(run("v1", "v2"), "checkout") == "regressed"
    # Going back from v2 to v1 is an improvement: reported as one, and nothing to fail on.
    back = run("v2", "v1", "--fail-on-regression", "5")
    assert verdict(back, "checkout") == "improved"
    assert "regression of at least" not in back


def test_wrong_input_exits_2_naming_what_is_wrong(two_releases, other_project):
    with pytest.raises(CommandError) as err:
        run("v1", "v9", "--project", "acme")
    assert err.value.returncode == 2 and "b: no release 'v9'" in str(err.value)
    with pytest.raises(CommandError) as err:
        run("v1", "v2")  # two projects now: which one?
    assert err.value.returncode == 2 and "--project" in str(err.value)
    with pytest.raises(CommandError) as err:
        run("v1", "v2", "--project", "globex")
    assert err.value.returncode == 2 and "a: no release 'v1'" in str(err.value)
    with pytest.raises(CommandError) as err:
        run("v1", "v2", "--project", "acme", "--since", "soon")
    assert err.value.returncode == 2 and "since:" in str(err.value)


def test_real_process_exit_status(stack_env, project):
    make_release(project, "v1", 60, fetch_ms=300.0, seed=1)
    make_release(project, "v2", 60, fetch_ms=900.0, seed=2)
    cmd = [sys.executable, "manage.py", "compare_releases", "v1", "v2", "--fail-on-regression", "10"]
    done = subprocess.run(cmd, env=stack_env, cwd=settings.BASE_DIR, capture_output=True, text=True,
                          timeout=120)
    assert done.returncode == 1, done.stderr
    assert "tool:fetch_invoice" in done.stdout
    done = subprocess.run(cmd[:-2], env=stack_env, cwd=settings.BASE_DIR, capture_output=True,
                          text=True, timeout=120)
    assert done.returncode == 0, done.stderr
