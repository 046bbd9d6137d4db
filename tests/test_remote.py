"""The Redis shared tier against a real redis-server (started and stopped here): fetch before
compiling, publish after, compile-once across hosts, verification of every fetched byte, and
failing open when the tier is down, slow, full, evicting or poisoned."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest

from _subproc import child_env, cli, cli_argv, cli_json, last_json, together

pytestmark = pytest.mark.slow

redis = pytest.importorskip("redis")
from _redis import SERVER, RedisServer  # noqa: E402

if SERVER is None:
    pytest.skip("redis-server is not installed (.ci/run installs it)", allow_module_level=True)

TINY = 5


@pytest.fixture
def tier(tmp_path):
    server = RedisServer(str(tmp_path))
    yield server
    if server.proc.poll() is None:
        server.kill()


@pytest.fixture(scope="module")
def snapshot(tmp_path_factory):
    """Every key a writer's prebuild of ``tiny`` publishes (built once for the module)."""
    folder = tmp_path_factory.mktemp("snap")
    server = RedisServer(str(folder))
    try:
        report = prebuild(folder / "c", server.url())
        assert (report["compiled"], report["remote"]["published"]) == (TINY, TINY)
        return {k: server.client.dump(k) for k in server.client.keys("*")}
    finally:
        server.kill()


@pytest.fixture
def published(tier, snapshot):
    """A tier holding what one writer published."""
    for key, value in snapshot.items():
        tier.client.restore(key, 0, value)
    return tier


def prebuild(root, url, *extra, env=None, expect=0):
    return cli_json(
        "prebuild",
        "--preset",
        "tiny",
        "--cache-dir",
        root,
        "--remote",
        url,
        *extra,
        expect=expect,
        env=env,
    )


WARMUP = """
import json, logging, os, sys
logging.basicConfig(level=logging.WARNING)
if os.environ.get("QSA_TEST_NO_PLANNING"):
    import qsa_warmup.qsa.planning as planner
    def no_planning(*args):
        raise AssertionError("planned")
    planner._decode_points = no_planning
from qsa_warmup import warmup
r = warmup("tiny", target="sm_90", cache_dir=sys.argv[1], jobs=1, remote=sys.argv[2])
print(json.dumps({"loaded": r.loaded, "compiled": r.compiled, "fetched": r.fetched,
                  "remote": r.remote, "warnings": r.warnings}))
"""


def warm(root, url, env=None):
    p = subprocess.run(
        [sys.executable, "-c", WARMUP, str(root), url],
        capture_output=True,
        text=True,
        env=env or child_env(),
        timeout=600,
    )
    assert p.returncode == 0, p.stderr[-3000:]
    return last_json(p)


def test_a_cold_host_fetches_everything_from_a_warm_tier(published, tmp_path):
    tier = published
    assert len(tier.keys("entry")) == TINY
    report = warm(tmp_path / "b", tier.url())
    assert (report["compiled"], report["fetched"], report["loaded"]) == (0, TINY, TINY)
    blobs = sum(tier.client.strlen(k) for k in tier.keys("blob"))
    assert report["remote"]["bytes_fetched"] == blobs
    # the hits were copied down: the local cache alone now serves this host
    assert cli_json("check", "--preset", "tiny", "--cache-dir", tmp_path / "b")["ok"] == TINY
    info = cli_json(
        "info", "--preset", "tiny", "--cache-dir", tmp_path / "b", "--remote", tier.url()
    )
    assert info["remote"]["entries"] == TINY and info["remote"]["counters"]["hits"] == TINY
    out = cli_json(
        "check", "--preset", "tiny", "--cache-dir", tmp_path / "c", "--remote", tier.url(), expect=0
    )
    assert len(out["remote"]["held"]) == TINY


def test_hosts_starting_together_compile_each_spec_once(tier, tmp_path):
    reports = together(
        [
            cli_argv(
                "prebuild",
                "--preset",
                "tiny",
                "--json",
                "--jobs",
                2,
                "--cache-dir",
                tmp_path / f"host{i}",
                "--remote",
                tier.url(),
            )
            for i in range(4)
        ]
    )
    assert sum(r["compiled"] for r in reports) == TINY
    assert all(r["compiled"] + r["fetched"] == TINY for r in reports)


def test_hosts_whose_starts_find_the_tier_slow_still_compile_each_spec_once(tier, tmp_path):
    # every start gives up waiting on the tier at once (a budget of a microsecond, as on a
    # host whose cores are all busy), yet the builds that follow use its locks
    url = tier.url(budget="0.000001")
    reports = together(
        [[sys.executable, "-c", WARMUP, str(tmp_path / f"host{i}"), url] for i in range(3)]
    )
    assert sum(r["compiled"] for r in reports) == TINY, reports
    assert all(r["loaded"] == TINY for r in reports)
    assert any("slow" in w for r in reports for w in r["warnings"])


def _poison(tier, how):
    entry_key = next(k for k in tier.keys("entry"))
    record = json.loads(tier.client.get(entry_key))
    name, digest = next((n, d) for n, d in record["entry"]["files"].items() if n.endswith(".cubin"))
    blob = next(k for k in tier.keys("blob") if k.endswith(digest))
    if how == "wrong bytes":
        data = bytearray(tier.client.get(blob))
        data[len(data) // 2] ^= 0xFF
        tier.client.set(blob, bytes(data))
    elif how == "evicted":
        tier.client.delete(blob)
    elif how == "host code":
        # a launcher .so slipped into an entry, with its bytes in the tier: never fetched
        record["entry"]["files"]["__triton_launcher.so"] = digest
        tier.client.set(entry_key, json.dumps(record))
    elif how == "other spec":
        record["entry"]["key"] = "something else"
        tier.client.set(entry_key, json.dumps(record))


@pytest.mark.parametrize(
    "how, counter",
    [
        ("wrong bytes", "poisoned"),
        ("evicted", "evicted"),
        ("host code", "poisoned"),
        ("other spec", "poisoned"),
    ],
)
def test_a_bad_value_is_detected_not_loaded_and_compiled_around(published, tmp_path, how, counter):
    tier = published
    _poison(tier, how)
    report = warm(tmp_path / "b", tier.url())
    assert report["remote"][counter] == 1
    assert (report["fetched"], report["compiled"], report["loaded"]) == (TINY - 1, 1, TINY)
    assert any("compiling locally" in w for w in report["warnings"])
    assert cli_json("check", "--preset", "tiny", "--cache-dir", tmp_path / "b")["ok"] == TINY
    # a writer's rebuild put right bytes back: the next host fetches all
    assert warm(tmp_path / "c", tier.url())["fetched"] == TINY


def test_signed_tier(tier, tmp_path):
    k1, k2 = child_env(QSA_WARMUP_REMOTE_KEY="k1"), child_env(QSA_WARMUP_REMOTE_KEY="k2")
    prebuild(tmp_path / "a", tier.url(), env=k1)
    # with the key, the plan comes from the tier too: this host never plans
    assert len(tier.keys("plan")) == 1
    no_planning = child_env(QSA_WARMUP_REMOTE_KEY="k1", QSA_TEST_NO_PLANNING="1")
    assert warm(tmp_path / "b", tier.url(), env=no_planning)["fetched"] == TINY
    # a plan memo that fails its signature is not taken: the host plans
    plan_key = tier.keys("plan")[0]
    record = json.loads(tier.client.get(plan_key))
    record["memo"] = record["memo"][:1]
    tier.client.set(plan_key, json.dumps(record))
    tampered = warm(tmp_path / "b2", tier.url(), env=k1)
    assert tampered["fetched"] == TINY and tampered["loaded"] == TINY
    assert any("plan" in w and "signed" in w for w in tampered["warnings"])
    # a wrong key: prebuild and check refuse in one line and change nothing
    for command in ("prebuild", "check"):
        p = cli(
            command,
            "--preset",
            "tiny",
            "--cache-dir",
            tmp_path / "c",
            "--remote",
            tier.url(),
            env=k2,
        )
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
        assert "QSA_WARMUP_REMOTE_KEY" in p.stderr
    assert not os.path.exists(tmp_path / "c" / "qsa") or not os.listdir(tmp_path / "c" / "qsa")
    # a server with the wrong key loads nothing from the tier, and serves
    report = warm(tmp_path / "d", tier.url(), env=k2)
    assert (report["fetched"], report["compiled"]) == (0, TINY)


def test_unsigned_entries_are_not_loaded_by_a_server_holding_a_key(published, tmp_path):
    tier = published
    k1 = child_env(QSA_WARMUP_REMOTE_KEY="k1")
    report = warm(tmp_path / "f", tier.url(), env=k1)
    assert report["remote"]["poisoned"] == TINY and report["compiled"] == TINY


def test_readonly_prefix_and_ttl(tier, tmp_path):
    ro = prebuild(tmp_path / "a", tier.url(), "--remote-readonly")
    assert ro["remote"]["published"] == 0 and tier.client.dbsize() == 0
    assert prebuild(tmp_path / "b", tier.url(readonly=1))["remote"]["published"] == 0
    prebuild(tmp_path / "c", tier.url(prefix="fleet-a", ttl=100))
    keys = [k.decode() for k in tier.client.keys("*")]
    assert keys and all(k.startswith("fleet-a:v1:") for k in keys)
    entry = next(k for k in keys if ":entry:" in k)
    assert 0 < tier.client.ttl(entry) <= 100
    # another prefix is another tier
    assert warm(tmp_path / "d", tier.url(prefix="fleet-b"))["fetched"] == 0


def test_tier_down_slow_or_full_fails_open(tier, tmp_path):
    # down: nothing listens there
    dead = f"unix://{tmp_path}/nothing.sock"
    p = cli(
        "prebuild", "--preset", "tiny", "--cache-dir", tmp_path / "a", "--remote", dead, "--json"
    )
    assert p.returncode == 0 and json.loads(p.stdout)["compiled"] == TINY
    assert "compiling locally" in p.stderr
    p = cli("check", "--preset", "tiny", "--cache-dir", tmp_path / "a", "--remote", dead)
    assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, p.stderr
    # slow: a server that accepts and never answers costs one timeout, then is left alone
    mute = socket.socket(socket.AF_UNIX)
    mute.bind(str(tmp_path / "mute.sock"))
    mute.listen(64)
    try:
        report = warm(tmp_path / "b", f"unix://{tmp_path}/mute.sock?timeout=0.3")
    finally:
        mute.close()
    assert report["compiled"] == TINY and report["remote"]["errors"] >= 1
    assert report["remote"]["seconds"] < 1.0
    # full: every write refused
    tier.client.config_set("maxmemory-policy", "noeviction")
    tier.client.config_set("maxmemory", 1)
    full = prebuild(tmp_path / "c", tier.url())
    assert full["compiled"] == TINY and full["remote"]["published"] == 0
    assert full["remote"]["problems"]


def test_malformed_urls(tmp_path):
    urls = ["http://host:1/0", "redis://", "redis://h:port/0", "redis://h/0?ttl=x", "unix://"]
    commands = ["prebuild", "check", "info", "prebuild", "check"]
    for url, command in zip(urls, commands):
        p = cli(command, "--preset", "tiny", "--cache-dir", tmp_path, "--remote", url)
        assert p.returncode == 2 and len(p.stderr.strip().splitlines()) == 1, (url, p.stderr)
        assert "--remote" in p.stderr
    assert not os.path.exists(tmp_path / "qsa")


def test_redis_killed_mid_build(tier, tmp_path):
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "qsa_warmup",
            "prebuild",
            "--preset",
            "tiny",
            "--json",
            "--jobs",
            "1",
            "--cache-dir",
            str(tmp_path / "a"),
            "--remote",
            tier.url(),
        ],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    deadline = time.monotonic() + 300
    while not tier.keys("entry"):
        assert proc.poll() is None and time.monotonic() < deadline
        time.sleep(0.05)
    tier.kill()
    out, err = proc.communicate(timeout=600)
    report = json.loads(out)
    assert proc.returncode == 0 and report["failed"] == 0
    assert report["compiled"] == report["planned"] and report["remote"]["published"] >= 1
    assert cli_json("check", "--preset", "tiny", "--cache-dir", tmp_path / "a")["ok"] == TINY


HOLDER = """
import sys, time
from qsa_warmup.cache import BoundCache
from qsa_warmup.qsa.config import load_config
cache = BoundCache(load_config(preset="tiny"), "sm_90", sys.argv[1], remote_url=sys.argv[2])
spec = cache.plan(offline=True).specs[0]
with cache.remote.compile_turn(cache, spec, 60) as fetched:
    assert not fetched
    print("holding", flush=True)
    time.sleep(600)
"""


def test_a_dead_lock_holder_does_not_stall_the_fleet(tier, tmp_path):
    url = tier.url(lock_ttl=3)
    holder = subprocess.Popen(
        [sys.executable, "-c", HOLDER, str(tmp_path / "h"), url],
        stdout=subprocess.PIPE,
        text=True,
        env=child_env(),
    )
    assert holder.stdout.readline().strip() == "holding"
    assert len(tier.keys("lock")) == 1
    holder.send_signal(signal.SIGKILL)
    holder.wait()
    start = time.monotonic()
    report = prebuild(tmp_path / "a", url)
    assert report["compiled"] == TINY and report["failed"] == 0
    assert time.monotonic() - start < 60  # the lock lapsed; nobody waited for lock_timeout
    assert not tier.keys("lock")
