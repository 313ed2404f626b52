"""tests/perf/small_msync.py (bench_store's small-flush figures) runs on real files and gives a
figure for each way of writing (a benchmark nobody runs in CI would rot unseen)."""
from __future__ import annotations

from tests.perf import small_msync


def test_every_way_of_writing_is_timed(tmp_path):
    results = small_msync.run(str(tmp_path), mib=1, samples=5)
    assert [r.mode for r in results] == list(small_msync.MODES)
    assert all(r.fresh_us > 0 and r.after_us > 0 for r in results)
    assert list(tmp_path.iterdir()) == []  # the file is removed
