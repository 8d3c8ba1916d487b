"""The name-service check before a TCPStore study, on this machine's resolver and on one whose
/etc/hosts answers the lookup (a private mount namespace: nothing outside it changes)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import textwrap
import time

import pytest

from pytest_distbench.harness.environment.resolver import FIX, LOOPBACK_MAPPED, check_reverse_lookup


def test_the_check_is_bounded_and_names_cause_and_fix_when_it_stalls():
    began = time.monotonic()
    check = check_reverse_lookup(burst=64, wait_s=1.0)
    assert time.monotonic() - began < 5  # a stalled lookup is not waited for
    assert check.name == "reverse_lookup" and check.status in ("ok", "warn")
    if check.status == "warn":
        assert LOOPBACK_MAPPED in check.message and FIX in check.message
        assert "unanswered after 1 s" in check.message


@pytest.mark.skipif(shutil.which("unshare") is None, reason="needs unshare")
def test_the_check_is_ok_where_etc_hosts_answers_the_lookup(tmp_path):
    hosts = tmp_path / "hosts"
    hosts.write_text(open("/etc/hosts").read() + f"\n{LOOPBACK_MAPPED} localhost\n")
    script = textwrap.dedent("""
        from pytest_distbench.harness.environment.resolver import check_reverse_lookup
        print(check_reverse_lookup().status)
    """)
    done = subprocess.run(
        ["unshare", "-m", "sh", "-c",
         f"mount --bind {hosts} /etc/hosts && {sys.executable} -c '{script}'"],
        capture_output=True, text=True, timeout=60)
    if done.returncode != 0:
        pytest.skip(f"no private mount namespace here: {done.stderr.strip()[:200]}")
    assert done.stdout.strip() == "ok"
