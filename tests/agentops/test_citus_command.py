"""`make citus` says why it cannot build Citus here, and what to do instead (agentops/citus.py).
Starting the cluster itself is `make test-citus`'s business: tests/scale/test_citus.py."""

from __future__ import annotations

import pytest

from agentops import citus


@pytest.fixture
def no_citus(monkeypatch):
    monkeypatch.setattr(citus, "installed", lambda: False)


def test_without_the_shared_folder_it_says_so_and_how_to_use_an_existing_cluster(no_citus, monkeypatch, tmp_path):
    monkeypatch.setattr(citus, "INSTALLER", tmp_path / "shared" / "citus" / "install.sh")
    with pytest.raises(citus.CitusUnavailable) as refused:
        citus.ensure_installed()
    message = str(refused.value)
    assert "install.sh" in message and "DATABASE_URL" in message and "citus_add_node" in message


def test_without_root_it_names_the_command_to_run_once(no_citus, monkeypatch, tmp_path):
    installer = tmp_path / "install.sh"
    installer.write_text("exit 1\n")
    monkeypatch.setattr(citus, "INSTALLER", installer)
    monkeypatch.setattr(citus.os, "geteuid", lambda: 1000)
    with pytest.raises(citus.CitusUnavailable, match=f"sudo {installer}"):
        citus.ensure_installed()


def test_stop_and_url_of_a_folder_with_no_cluster(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("AGENTOPS_DATA_DIR", str(tmp_path))
    assert citus.main(["stop"]) == 0
    assert "nothing running" in capsys.readouterr().out
    assert citus.main(["url"]) == 1
    assert "make citus" in capsys.readouterr().err
