"""Which home and which profiles a command acts on."""

from __future__ import annotations

import pytest

from hermes_keeper.errors import KeeperError
from hermes_keeper.home import select_profiles


@pytest.fixture
def root(tmp_path):
    r = tmp_path / "hermes"
    for name in ("work", "play", "Bad Name", "x" * 70):
        (r / "profiles" / name).mkdir(parents=True)
    return r


def names(ps):
    return [p.name for p in ps]


def test_all_profiles_ignores_invalid_names(root):
    assert names(select_profiles(root, all_profiles=True, env={})) == ["default", "play", "work"]


def test_default_is_root_unless_active_profile(root):
    assert select_profiles(root, env={})[0].home == root.resolve()
    (root / "active_profile").write_text("work\n")
    assert names(select_profiles(root, env={})) == ["work"]
    assert names(select_profiles(root, profile="default", env={})) == ["default"]


def test_env_and_home_dir(root, tmp_path, monkeypatch):
    assert select_profiles(env={"HERMES_HOME": str(root)})[0].home == root.resolve()
    # HERMES_HOME pointing into a profile (what `hermes -p work` sets) selects that profile.
    picked = select_profiles(env={"HERMES_HOME": str(root / "profiles" / "work")})
    assert names(picked) == ["work"] and picked[0].root == root.resolve()
    monkeypatch.setenv("HOME", str(tmp_path))
    (tmp_path / ".hermes").mkdir()
    assert select_profiles(env={})[0].home == (tmp_path / ".hermes").resolve()


def test_missing(root, tmp_path):
    with pytest.raises(KeeperError, match="Hermes home not found"):
        select_profiles(tmp_path / "nowhere", env={})
    with pytest.raises(KeeperError, match="not found"):
        select_profiles(root, profile="ghost", env={})


@pytest.mark.parametrize("content, picked", [("../etc\n", "default"), ("Work", "default"), ("", "default")])
def test_invalid_active_profile_falls_back_to_default(root, content, picked):
    (root / "active_profile").write_text(content)
    assert names(select_profiles(root, env={})) == [picked]


def test_home_option_wins_over_env_and_profile_symlinks_are_listed(root, tmp_path):
    other = tmp_path / "other"
    other.mkdir()
    (root / "profiles" / "linked").symlink_to(other)
    picked = select_profiles(root, all_profiles=True, env={"HERMES_HOME": str(other)})
    # a linked profile is listed (issue 34: it was left out); each() follows or reports it
    assert names(picked) == ["default", "linked", "play", "work"] and picked[0].home == root.resolve()
    with pytest.raises(KeeperError, match="Hermes home not found"):
        select_profiles(env={"HERMES_HOME": str(tmp_path / "gone")})


def test_active_profile_that_does_not_exist_is_an_error(root):
    (root / "active_profile").write_text("ghost\n")
    with pytest.raises(KeeperError, match="profile 'ghost' not found"):
        select_profiles(root, env={})
