"""Bundles: export and import a cache as one verified file; every refusal is one line, exit 2,
and leaves the receiving cache as it was."""

import gzip
import hashlib
import io
import json
import os
import shutil
import tarfile

import pytest

from _subproc import child_env, cli, cli_json, last_json, python

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    root = str(tmp_path_factory.mktemp("cache") / "c")
    report = cli_json(
        "prebuild", "--preset", "tiny", "--target", "sm_90,sm_120", "--cache-dir", root
    )
    assert [t["compiled"] for t in report["targets"]] == [5, 5]
    return root


@pytest.fixture(scope="module")
def bundle(built, tmp_path_factory):
    path = str(tmp_path_factory.mktemp("b") / "tiny.qsa")
    out = cli_json("export", "--cache-dir", built, "--out", path)
    assert sorted(d["target"] for d in out["deployments"]) == ["sm_120", "sm_90"]
    return path


@pytest.fixture(scope="module")
def imported(bundle, tmp_path_factory):
    """A cache that already holds the good bundle (tests that must not change it use copies)."""
    dest = str(tmp_path_factory.mktemp("imported") / "d")
    cli_json("import", bundle, "--cache-dir", dest)
    return dest


def tree(root):
    """Every file under ``root`` with its bytes' digest (to show nothing changed)."""
    found = {}
    for base, _, files in os.walk(root):
        for name in files:
            with open(os.path.join(base, name), "rb") as f:
                found[os.path.relpath(os.path.join(base, name), root)] = hashlib.sha256(
                    f.read()
                ).hexdigest()
    return found


def refused(*args, env=None):
    p = cli("import", *args, env=env)
    lines = p.stderr.strip().splitlines()
    assert p.returncode == 2 and len(lines) == 1, (p.returncode, p.stderr)
    assert "Traceback" not in p.stderr
    return lines[0]


def test_round_trip_then_idempotent(bundle, tmp_path):
    dest = str(tmp_path / "d")
    first = cli_json("import", bundle, "--cache-dir", dest)
    assert first["added"] > 0 and first["present"] == 0
    for target in ("sm_90", "sm_120"):
        assert (
            cli_json("check", "--preset", "tiny", "--target", target, "--cache-dir", dest)["ok"]
            == 5
        )
    before = tree(dest)
    again = cli_json("import", bundle, "--cache-dir", dest)
    assert again["added"] == 0 and again["present"] == first["added"]
    assert tree(dest) == before
    # group files name the receiving folder, so plain Triton hits there too
    for base, _, files in os.walk(os.path.join(dest, "triton")):
        for name in (n for n in files if n.startswith("__grp__")):
            with open(os.path.join(base, name)) as f:
                children = json.load(f)["child_paths"].values()
            assert all(os.path.dirname(p) == base for p in children)


def test_imported_cache_warms_up_with_zero_compiles_and_no_planning(bundle, tmp_path):
    dest = str(tmp_path / "d")
    cli_json("import", bundle, "--cache-dir", dest)
    # the import left the plan memos and this toolchain's identity in the folder
    assert os.listdir(os.path.join(dest, "plans"))
    memos = os.listdir(os.path.join(dest, "toolchain-memo"))
    assert any(n.startswith("triton_key") for n in memos)
    assert any(n.startswith("platform_key") for n in memos)
    p = python(
        f"""
        import json
        import qsa_warmup.qsa.planning as planner
        def no_planning(*args):
            raise AssertionError("planned")
        planner._decode_points = no_planning
        from qsa_warmup import warmup
        r = warmup("tiny", target="sm_90", cache_dir={dest!r}, jobs=1)
        print(json.dumps({{"loaded": r.loaded, "compiled": r.compiled}}))
        """
    )
    assert last_json(p) == {"loaded": 5, "compiled": 0}


def test_bundle_for_another_deployment(bundle, tmp_path):
    line = refused(bundle, "--preset", "default", "--cache-dir", tmp_path / "d")
    assert "holds no build of this config" in line
    assert not os.path.exists(tmp_path / "d" / "qsa") or not os.listdir(tmp_path / "d" / "qsa")


def _rebuilt(bundle, tmp_path, edit, *, compress=gzip.compress):
    """A copy of ``bundle`` with ``edit(index, members)`` applied (members: name -> (TarInfo,
    bytes)); the index's digest is recomputed unless the edit sets ``keep_digest``."""
    with open(bundle, "rb") as f:
        raw = f.read()
    if raw[:4] == b"\x28\xb5\x2f\xfd":
        import zstandard

        raw = zstandard.ZstdDecompressor().stream_reader(io.BytesIO(raw)).read()
    else:
        raw = gzip.decompress(raw)
    with tarfile.open(fileobj=io.BytesIO(raw)) as tar:
        members = {}
        for m in tar.getmembers():
            data = tar.extractfile(m).read() if m.isfile() else b""
            members[m.name] = (m, data)
    index = json.loads(members.pop("bundle.json")[1])
    keep = edit(index, members)
    if not keep:
        index["digest"] = hashlib.sha256(
            json.dumps(index["files"], sort_keys=True).encode()
        ).hexdigest()
    raw = io.BytesIO()
    with tarfile.open(fileobj=raw, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("bundle.json")
        blob = json.dumps(index).encode()
        info.size = len(blob)
        tar.addfile(info, io.BytesIO(blob))
        for name, (m, data) in members.items():
            m.name = name
            tar.addfile(m, io.BytesIO(data) if m.isfile() else None)
    path = tmp_path / "edited.qsa"
    path.write_bytes(compress(raw.getvalue()))
    return str(path)


def _first_binary(members):
    return next(n for n in members if n.endswith(".cubin"))


def _add_special(name, kind):
    info = tarfile.TarInfo(name)
    info.type = kind
    if kind in (tarfile.SYMTYPE, tarfile.LNKTYPE):
        info.linkname = "/etc/passwd"
    return info


@pytest.mark.parametrize(
    "case, expected",
    [
        ("flipped byte", "checksum mismatch"),
        ("unlisted member", "not in bundle.json"),
        ("listed but absent", "absent"),
        ("absolute path", "not a plain relative path"),
        ("dot-dot", "not a plain relative path"),
        ("symlink", "link"),
        ("hard link", "link"),
        ("device", "device or special file"),
        ("outside the layout", "outside a cache's layout"),
        ("index digest", "digest does not match"),
        ("entry names a file not carried", "is not carried with its checksum"),
        ("plan of another deployment", "is not a plan of a deployment it carries"),
    ],
)
def test_refuses_a_bad_bundle_and_changes_nothing(bundle, imported, tmp_path, case, expected):
    def edit(index, members):
        binary = _first_binary(members)
        if case == "flipped byte":
            info, data = members[binary]
            members[binary] = (info, bytes([data[0] ^ 1]) + data[1:])
        elif case == "unlisted member":
            info = tarfile.TarInfo("triton/X/extra.bin")
            info.size = 1
            members["triton/X/extra.bin"] = (info, b"x")
        elif case == "listed but absent":
            del members[binary]
        elif case in ("absolute path", "dot-dot", "outside the layout"):
            name = {
                "absolute path": "/tmp/qsa-escape",
                "dot-dot": "triton/../../qsa-escape",
                "outside the layout": "plans/evil.json",
            }[case]
            info = tarfile.TarInfo(name)
            info.size = 1
            members[name] = (info, b"x")
            index["files"][name] = hashlib.sha256(b"x").hexdigest()
        elif case in ("symlink", "hard link", "device"):
            kind = {"symlink": tarfile.SYMTYPE, "hard link": tarfile.LNKTYPE}.get(
                case, tarfile.CHRTYPE
            )
            name = "triton/X/node"
            members[name] = (_add_special(name, kind), b"")
            index["files"][name] = hashlib.sha256(b"").hexdigest()
        elif case == "index digest":
            index["digest"] = "0" * 64
            return True
        elif case == "plan of another deployment":
            memo = next(n for n in members if n.startswith("plans/"))
            name = "plans/" + "0" * 16 + memo.split("/")[1][16:]
            members[name] = members.pop(memo)
            index["files"][name] = index["files"].pop(memo)
        elif case == "entry names a file not carried":
            name = next(n for n in members if "/entries/" in n)
            info, data = members[name]
            entry = json.loads(data)
            entry["files"]["ghost.cubin"] = "0" * 64
            data = json.dumps(entry).encode()
            info.size = len(data)
            members[name] = (info, data)
            index["files"][name] = hashlib.sha256(data).hexdigest()
        return False

    path = _rebuilt(bundle, tmp_path, edit)
    dest = tmp_path / "d"
    shutil.copytree(imported, dest)
    before = tree(dest)
    line = refused(path, "--cache-dir", dest)
    assert expected in line, line
    assert tree(dest) == before
    assert not os.path.exists("/tmp/qsa-escape") and not os.path.exists(tmp_path / "qsa-escape")
    assert not [n for n in os.listdir(dest) if n.startswith(".import-")]


@pytest.mark.parametrize("damage", ["truncated", "garbage", "empty", "missing"])
def test_refuses_unreadable_bundles(bundle, tmp_path, damage):
    path = tmp_path / "b.qsa"
    data = open(bundle, "rb").read()
    if damage == "truncated":
        path.write_bytes(data[: len(data) // 2])
    elif damage == "garbage":
        path.write_bytes(os.urandom(4096))
    elif damage == "empty":
        path.write_bytes(b"")
    line = refused(path, "--cache-dir", tmp_path / "d")
    assert str(path) in line
    assert not os.path.exists(tmp_path / "d" / "qsa") or not os.listdir(tmp_path / "d" / "qsa")


def _other_toolchain(index, members, part="python", value="3.99"):
    """Make the bundle's sm_90 deployment look built by another toolchain, consistently."""
    dep = next(d for d in index["deployments"] if d["target"] == "sm_90")
    old = dep["manifest"]
    dep["fingerprint"][part] = value
    digest = hashlib.sha256(json.dumps(dep["fingerprint"], sort_keys=True).encode()).hexdigest()
    new = old[:-16] + digest[:16]
    dep["manifest"] = new
    for name in [n for n in members if f"/{old}/" in n or n.startswith(f"plans/{old}-")]:
        info, data = members.pop(name)
        if name.endswith("manifest.json"):
            manifest = json.loads(data)
            manifest["fingerprint"] = dep["fingerprint"]
            data = json.dumps(manifest).encode()
            info.size = len(data)
        renamed = name.replace(f"/{old}/", f"/{new}/").replace(f"plans/{old}-", f"plans/{new}-")
        members[renamed] = (info, data)
        del index["files"][name]
        index["files"][renamed] = hashlib.sha256(data).hexdigest()
    return False


def test_toolchain_mismatch_refused_unless_forced(bundle, tmp_path):
    path = _rebuilt(bundle, tmp_path, _other_toolchain)
    line = refused(path, "--cache-dir", tmp_path / "d")
    assert "sm_90" in line and "python 3.99 vs" in line and "--force" in line
    forced = cli_json("import", path, "--force", "--cache-dir", tmp_path / "d")
    assert forced["added"] > 0
    # what was forced in is stale here, and check says why
    out = cli_json(
        "check", "--preset", "tiny", "--target", "sm_90", "--cache-dir", tmp_path / "d", expect=1
    )
    assert {f["state"] for f in out["failing"]} == {"stale"}
    assert "python 3.99" in out["failing"][0]["reason"]


def test_signed_bundles(built, tmp_path):
    signed = str(tmp_path / "s.qsa")
    cli_json(
        "export", "--cache-dir", built, "--out", signed, env=child_env(QSA_WARMUP_REMOTE_KEY="k1")
    )
    wrong = refused(
        signed, "--cache-dir", tmp_path / "d", env=child_env(QSA_WARMUP_REMOTE_KEY="k2")
    )
    assert "signed with another key" in wrong
    unsigned = str(tmp_path / "u.qsa")
    cli_json("export", "--cache-dir", built, "--out", unsigned, "--compression", "gzip")
    assert "is not signed" in refused(
        unsigned, "--cache-dir", tmp_path / "d", env=child_env(QSA_WARMUP_REMOTE_KEY="k1")
    )
    ok = cli_json(
        "import", signed, "--cache-dir", tmp_path / "d", env=child_env(QSA_WARMUP_REMOTE_KEY="k1")
    )
    assert ok["added"] > 0


def test_export_refuses_an_incomplete_cache(built, tmp_path):
    copy = str(tmp_path / "c")
    shutil.copytree(built, copy)
    entries = os.path.join(copy, "qsa", sorted(os.listdir(os.path.join(copy, "qsa")))[0], "entries")
    os.unlink(os.path.join(entries, sorted(os.listdir(entries))[0]))
    p = cli("export", "--cache-dir", copy, "--out", tmp_path / "x.qsa")
    assert p.returncode == 2 and "not built" in p.stderr and len(p.stderr.splitlines()) == 1
    assert not os.path.exists(tmp_path / "x.qsa")
    p = cli(
        "export",
        "--cache-dir",
        built,
        "--preset",
        "tiny",
        "--target",
        "sm_100",
        "--out",
        tmp_path / "y.qsa",
    )
    assert p.returncode == 2 and "prebuild --target sm_100" in p.stderr


def test_expect_fingerprint(built, tmp_path):
    info = cli_json("info", "--preset", "tiny", "--target", "sm_90", "--cache-dir", built)
    server = tmp_path / "server.json"
    server.write_text(json.dumps(info))
    assert (
        cli(
            "export",
            "--cache-dir",
            built,
            "--out",
            tmp_path / "ok.qsa",
            "--expect-fingerprint",
            server,
        ).returncode
        == 0
    )
    info["fingerprint"]["python"] = "3.99"
    server.write_text(json.dumps(info))
    for command in (
        ["export", "--cache-dir", built, "--out", tmp_path / "no.qsa"],
        ["prebuild", "--preset", "tiny", "--target", "sm_90", "--cache-dir", built],
    ):
        p = cli(*command, "--expect-fingerprint", server)
        assert p.returncode == 2 and len(p.stderr.splitlines()) == 1, p.stderr
        assert "python" in p.stderr and "3.99 on the server" in p.stderr
    assert not os.path.exists(tmp_path / "no.qsa")
    server.write_text("{}")
    assert (
        "holds no fingerprint"
        in cli(
            "prebuild", "--preset", "tiny", "--cache-dir", built, "--expect-fingerprint", server
        ).stderr
    )
