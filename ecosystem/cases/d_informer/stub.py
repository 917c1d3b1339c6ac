# Stub for zhouhaoyi/Informer2020 main_informer.py (run by the probe in every process before the script).
#
# Replaces only what comes from outside the repository:
#   * the data file: pandas.read_csv on a path whose file name is "synth.csv" (the args point --root_path /
#     --data_path there; nothing exists on disk) returns a seeded synthetic hourly series instead: a DataFrame
#     with columns date (hourly timestamps from 2016-07-01), HUFL, MULL, OT (float64, sine + noise), 119 rows.
#     Any other path goes to the real pandas.read_csv. With --data custom the repository's own Dataset_Custom
#     splits it 70/20/10 (train 83 rows -> 64 windows with seq_len 16, pred_len 4).
#   * numpy >= 2 removed the alias numpy.Inf that utils/tools.py (EarlyStopping) uses; it is put back as
#     numpy.inf (a compatibility alias only, same value). The repository pins numpy 1.19.
N_ROWS = 119
SYNTH_NAME = "synth.csv"


def _patch_numpy(np):
    if not hasattr(np, "Inf"):
        np.Inf = np.inf


def _patch_pandas(pd):
    import os
    real = pd.read_csv

    def read_csv(filepath_or_buffer, *args, **kwargs):
        if isinstance(filepath_or_buffer, (str, os.PathLike)) and \
                os.path.basename(os.fspath(filepath_or_buffer)) == SYNTH_NAME:
            import numpy as np
            rng = np.random.RandomState(1234)
            t = np.arange(N_ROWS, dtype=np.float64)
            dates = pd.date_range("2016-07-01 00:00:00", periods=N_ROWS, freq="h")
            return pd.DataFrame({
                "date": dates.strftime("%Y-%m-%d %H:%M:%S"),
                "HUFL": np.sin(t / 6.0) + 0.1 * rng.randn(N_ROWS),
                "MULL": np.cos(t / 9.0) + 0.1 * rng.randn(N_ROWS),
                "OT": np.sin(t / 12.0) + 0.5 * np.cos(t / 5.0) + 0.1 * rng.randn(N_ROWS),
            })
        return real(filepath_or_buffer, *args, **kwargs)

    read_csv.__wrapped__ = real
    pd.read_csv = read_csv


when_imported("numpy", _patch_numpy)  # noqa: F821 (provided by the probe)
when_imported("pandas", _patch_pandas)  # noqa: F821
