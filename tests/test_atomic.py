"""Atomic writes keep a run readable."""

from __future__ import annotations


def test_atomic_files_get_the_mode_open_would_give_not_mkstemps_0600(tmp_path):
    """A run's files must stay readable by a shared TensorBoard or a teammate: 0666 less the umask."""
    import os
    import stat

    from teamrl.atomic import atomic_write_text, current_umask
    from teamrl.marl.run import plot_curve

    old = os.umask(0o022)
    try:
        assert current_umask() == 0o022
        atomic_write_text(tmp_path / "a.json", "{}")
        assert stat.S_IMODE((tmp_path / "a.json").stat().st_mode) == 0o644
        os.umask(0o027)
        assert current_umask() == 0o027
        atomic_write_text(tmp_path / "b.json", "{}")
        assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o640
        plot_curve([{"step": 0, "return/mean": 0.0}, {"step": 1, "return/mean": 1.0}], tmp_path / "c.png")
        assert stat.S_IMODE((tmp_path / "c.png").stat().st_mode) == 0o640  # a marl run's curve too
    finally:
        os.umask(old)
