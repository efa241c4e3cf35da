"""The soak's long-lived lite-kv store (tools/soak.py): its servers, loading and
verifying key groups at their versions, and the final check of every key."""

from litebench.cluster.cluster import Background
from litebench.soak.common import OP_TIMEOUT, Lost, last_json, summary

# lite-kv: servers on nodes 0 and 1 for the whole soak (node 2 leaves and rejoins).
KV_SERVERS = "0,1"
KV_GROUPS = 4
KV_GROUP_KEYS = 16
KV_BENCH_KEYS = 32
KV_SINGLES = 8


class KvStore:
    """The long-lived lite-kv store, a part of `Soak`."""

    def kv(self, args):
        return f"lite-kv {args.split()[0]} --servers {KV_SERVERS} {' '.join(args.split()[1:])}"

    def start_kv(self):
        self.kv_servers = [Background(self.c, n, f"soakkv{n}", "lite-kv serve --buckets 128 --threads 2")
                           for n in (0, 1)]
        for s in self.kv_servers:
            s.wait_for("ready")
        for g in range(KV_GROUPS):
            self.kv_load(0, g, 1)
        res = self.c.exec(1, self.kv(f"load --keys {KV_BENCH_KEYS} --prefix b- --version 0 --json"),
                          timeout=OP_TIMEOUT, check=False)
        summary(1, res, "lite-kv load")
        self.ops["kv_put"] += KV_BENCH_KEYS

    def kv_load(self, n, group, version):
        res = self.c.exec(n, self.kv(f"load --keys {KV_GROUP_KEYS} --prefix g{group}- --version {version} "
                                     "--threads 2 --json"), timeout=OP_TIMEOUT, check=False)
        # Whatever happened, the group's keys are checked for the new version from now on.
        self.kv_versions[group] = version
        summary(n, res, f"lite-kv load of group {group} at version {version}")
        self.ops["kv_put"] += KV_GROUP_KEYS

    def kv_verify(self, n, group):
        version = self.kv_versions[group]
        res = self.c.exec(n, self.kv(f"verify --keys {KV_GROUP_KEYS} --prefix g{group}- --exact {version} --json"),
                          timeout=OP_TIMEOUT, check=False)
        s = last_json(res)
        if s and s["missing"] + s["wrong"]:
            raise Lost("kv", s["missing"] + s["wrong"], f"node {n}: group {group} at version {version}: {s}")
        s = summary(n, res, f"lite-kv verify of group {group}")
        self.ops["kv_get"] += s["keys"]

    def kv_final(self):
        """Every key's last version, exactly: the groups, the single keys, and the bench
        keys (whose values any version may have, but must be whole and present)."""
        for g in range(KV_GROUPS):
            self.guarded(f"final lite-kv verify of group {g}", self.kv_verify, 2 - g % 3, g)
        res = self.c.exec(2, self.kv(f"verify --keys {KV_BENCH_KEYS} --prefix b- --json"), timeout=OP_TIMEOUT,
                          check=False)
        s = last_json(res)
        if s and s["missing"] + s["wrong"]:
            self.lost("kv", s["missing"] + s["wrong"], f"final verify of the bench keys: {s}")
        else:
            self.guarded("final verify of the bench keys", summary, 2, res, "lite-kv verify")
            self.ops["kv_get"] += KV_BENCH_KEYS
        if self.kv_singles:
            script = "; ".join(f"echo \"{k}=$({self.kv(f'get {k}')} 2>&1)\"" for k in sorted(self.kv_singles))
            out = self.c.exec(0, script, timeout=OP_TIMEOUT).out
            got = dict(line.split("=", 1) for line in out.splitlines() if "=" in line)
            wrong = {k: (got.get(k), v) for k, v in self.kv_singles.items() if got.get(k) != v}
            self.ops["kv_get"] += len(self.kv_singles)
            if wrong:
                self.lost("kv", len(wrong), f"single keys (got, want): {wrong}")
