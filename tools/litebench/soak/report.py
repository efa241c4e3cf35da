"""The soak's report (tools/soak.py): what ran, what was injected, what was found
wrong, as a dict and as text."""


class Report:
    """The report, a part of `Soak`."""

    def fault_total(self):
        return sum(v for k, v in self.faults.items() if k != "lossy_seconds")

    def report(self, minutes):
        splats = self.c.splats()
        corrupt = sum(self.corrupt.values())
        return {
            "minutes": minutes,
            "seed": self.seed,
            "seconds": round(self.elapsed()),
            "rounds": self.rounds_done,
            "operations": sum(self.ops.values()),
            "operations_by_kind": dict(sorted(self.ops.items())),
            "checked": dict(sorted(self.volume.items())),
            "faults": self.fault_total(),
            "faults_by_kind": dict(sorted(self.faults.items())),
            "corrupt_or_lost": corrupt,
            "corrupt_or_lost_by_kind": dict(sorted(self.corrupt.items())),
            "failures": self.failures,
            "skipped": self.skipped,
            # None: the caller scans (vmtest's kmemleak test); 0: no kmemleak in this kernel.
            "kmemleak_nodes_scanned": getattr(self, "kmemleak_scanned", 0) if getattr(self, "kmemleak_asked", True)
            else None,
            "splats": len(splats),
            "splat_lines": [f"node{n}: {line}" for n, line in splats[:40]],
            "passed": not self.failures and corrupt == 0 and not splats,
        }



def human(report):
    lines = [f"soak: {report['minutes']:g} minutes (seed {report['seed']}), {report['rounds']} rounds in "
             f"{report['seconds']} s",
             f"  operations: {report['operations']}: " +
             ", ".join(f"{k} {v}" for k, v in report["operations_by_kind"].items()),
             "  checked besides: " + ", ".join(f"{k} {v}" for k, v in report["checked"].items()),
             f"  faults injected: {report['faults']}: " +
             ", ".join(f"{k} {v}" for k, v in report["faults_by_kind"].items()),
             f"  corrupt or lost items: {report['corrupt_or_lost']}" +
             ("".join(f", {k} {v}" for k, v in report["corrupt_or_lost_by_kind"].items())),
             "  kmemleak: left to the caller" if report["kmemleak_nodes_scanned"] is None
             else f"  kmemleak: {report['kmemleak_nodes_scanned']} node(s) scanned" if report["kmemleak_nodes_scanned"]
             else "  kmemleak: not in this kernel",
             f"  splats: {report['splats']}"]
    lines += [f"    {line}" for line in report["splat_lines"]]
    lines += [f"  skipped: {s}" for s in report["skipped"]]
    lines += [f"  FAILURE {f}" for f in report["failures"]]
    lines.append("PASS" if report["passed"] else "FAIL")
    return "\n".join(lines)
