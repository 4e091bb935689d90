"""NVIDIA's metric database (Perfworks host library) read through ctypes, without a GPU.

`libnvperf_host.so` ships inside the `ncu-report` wheel (a requirement of this project); it is
the library `ncu --query-metrics --chips X` reads. For a chip name ("GA102", "GH100", ...) it
says which metrics exist and which raw hardware counters each metric is computed from. No GPU,
driver or CUDA context is involved: the evaluator is built on a "virtual device" from the chip
name alone.

Only the calls this project needs are bound. Struct layouts follow NVIDIA's public headers
``nvperf_host.h`` (NVPW_InitializeHost_Params, NVPW_GetSupportedChipNames_Params,
NVPW_MetricsEvaluator_GetMetricNames_Params, NVPW_MetricEvalRequest,
NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest_Params,
NVPW_MetricsEvaluator_GetMetricRawDependencies_Params, NVPW_MetricsEvaluator_Destroy_Params)
and ``nvperf_cuda_host.h`` (NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize_Params,
NVPW_CUDA_MetricsEvaluator_Initialize_Params). Every params struct starts with ``structSize``,
which the library uses to tell versions apart; we pass the size of the struct as declared here.

Loading is lazy and soft: `open_database()` returns None (and `load_error()` says why) when the
library is missing or does not load (no wheel for the platform, another architecture, ...);
callers then use the table committed from it (profiling.ncu.chips).
"""

from __future__ import annotations

import ctypes as C
import importlib.util
from functools import lru_cache
from importlib import metadata
from pathlib import Path

LIBRARY_NAME = "libnvperf_host.so"
METRIC_TYPES = {"counter": 0, "ratio": 1, "throughput": 2}
"""NVPW_MetricType: counters (``*.sum``/``.avg``/... rollups), ratios, throughputs."""

_size_t, _void_p, _char_p = C.c_size_t, C.c_void_p, C.c_char_p


def _params(name: str, *fields: tuple[str, object]) -> type[C.Structure]:
    """A params struct: structSize and pPriv, then `fields` (the header's order)."""
    return type(
        name, (C.Structure,), {"_fields_": [("structSize", _size_t), ("pPriv", _void_p), *fields]}
    )


_InitializeHost = _params("InitializeHost")
_GetSupportedChipNames = _params(
    "GetSupportedChipNames", ("ppChipNames", C.POINTER(_char_p)), ("numChipNames", _size_t)
)
_ScratchBufferSize = _params(
    "ScratchBufferSize",
    ("pChipName", _char_p),
    ("pCounterAvailabilityImage", _void_p),
    ("scratchBufferSize", _size_t),
)
_EvaluatorInitialize = _params(
    "EvaluatorInitialize",
    ("pScratchBuffer", _void_p),
    ("scratchBufferSize", _size_t),
    ("pChipName", _char_p),
    ("pCounterAvailabilityImage", _void_p),
    ("pCounterDataImage", _void_p),
    ("counterDataImageSize", _size_t),
    ("pMetricsEvaluator", _void_p),
)
_EvaluatorDestroy = _params("EvaluatorDestroy", ("pMetricsEvaluator", _void_p))
_GetMetricNames = _params(
    "GetMetricNames",
    ("pMetricsEvaluator", _void_p),
    ("metricType", C.c_uint8),
    ("pMetricNames", C.POINTER(C.c_char)),
    ("pMetricNameBeginIndices", C.POINTER(_size_t)),
    ("numMetrics", _size_t),
)


class _MetricEvalRequest(C.Structure):
    _fields_ = [
        ("metricIndex", _size_t),
        ("metricType", C.c_uint8),
        ("rollupOp", C.c_uint8),
        ("submetric", C.c_uint16),
    ]


_ConvertName = _params(
    "ConvertName",
    ("pMetricsEvaluator", _void_p),
    ("pMetricName", _char_p),
    ("pMetricEvalRequest", C.POINTER(_MetricEvalRequest)),
    ("metricEvalRequestStructSize", _size_t),
)
_RawDependencies = _params(
    "RawDependencies",
    ("pMetricsEvaluator", _void_p),
    ("pMetricEvalRequests", C.POINTER(_MetricEvalRequest)),
    ("numMetricEvalRequests", _size_t),
    ("metricEvalRequestStructSize", _size_t),
    ("metricEvalRequestStrideSize", _size_t),
    ("ppRawDependencies", C.POINTER(_char_p)),
    ("numRawDependencies", _size_t),
    ("ppOptionalRawDependencies", C.POINTER(_char_p)),
    ("numOptionalRawDependencies", _size_t),
)


class NvperfError(Exception):
    """A call into libnvperf_host.so returned a non-zero NVPA_Status."""


class ChipMetrics:
    """The metric database of one chip (an NVPW_MetricsEvaluator on a virtual device)."""

    def __init__(self, db: "MetricDatabase", chip: str):
        self.chip = chip
        self._db = db
        size = _ScratchBufferSize(pChipName=chip.encode())
        db._call("NVPW_CUDA_MetricsEvaluator_CalculateScratchBufferSize", size)
        self._scratch = C.create_string_buffer(size.scratchBufferSize)  # must outlive the evaluator
        init = _EvaluatorInitialize(
            pScratchBuffer=C.cast(self._scratch, _void_p),
            scratchBufferSize=size.scratchBufferSize,
            pChipName=chip.encode(),
        )
        db._call("NVPW_CUDA_MetricsEvaluator_Initialize", init)
        self._evaluator = init.pMetricsEvaluator

    def close(self) -> None:
        if self._evaluator:
            self._db._call(
                "NVPW_MetricsEvaluator_Destroy",
                _EvaluatorDestroy(pMetricsEvaluator=self._evaluator),
            )
            self._evaluator = None

    def __enter__(self) -> "ChipMetrics":
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def base_names(self, kind: str = "counter") -> list[str]:
        """Base metric names of one kind (counter, ratio, throughput), without rollup or submetric:
        ``dram__bytes_read``, ``sm__ops_path_tensor_src_fp16``, ..."""
        p = _GetMetricNames(pMetricsEvaluator=self._evaluator, metricType=METRIC_TYPES[kind])
        self._db._call("NVPW_MetricsEvaluator_GetMetricNames", p)
        base = C.cast(p.pMetricNames, _void_p).value
        starts = p.pMetricNameBeginIndices
        names = [C.string_at(base + starts[i]).decode() for i in range(p.numMetrics)]
        return names

    def _request(self, name: str) -> _MetricEvalRequest | None:
        req = _MetricEvalRequest()
        p = _ConvertName(
            pMetricsEvaluator=self._evaluator,
            pMetricName=name.encode(),
            pMetricEvalRequest=C.pointer(req),
            metricEvalRequestStructSize=C.sizeof(_MetricEvalRequest),
        )
        return (
            req
            if self._db._status("NVPW_MetricsEvaluator_ConvertMetricNameToMetricEvalRequest", p)
            == 0
            else None
        )

    def has(self, name: str) -> bool:
        """True when `name` (a full metric name such as ``dram__bytes_read.sum``) exists on the chip."""
        return self._request(name) is not None

    def raw_dependencies(self, name: str) -> tuple[str, ...]:
        """The raw hardware counters the metric `name` is computed from (sorted); () for a name the
        chip does not have."""
        req = self._request(name)
        if req is None:
            return ()
        p = _RawDependencies(
            pMetricsEvaluator=self._evaluator,
            pMetricEvalRequests=C.pointer(req),
            numMetricEvalRequests=1,
            metricEvalRequestStructSize=C.sizeof(_MetricEvalRequest),
            metricEvalRequestStrideSize=C.sizeof(_MetricEvalRequest),
        )
        self._db._call("NVPW_MetricsEvaluator_GetMetricRawDependencies", p)  # counts only
        needed, optional = p.numRawDependencies, p.numOptionalRawDependencies
        deps = (_char_p * max(needed, 1))()
        opt = (_char_p * max(optional, 1))()
        p.ppRawDependencies, p.ppOptionalRawDependencies = deps, opt
        self._db._call("NVPW_MetricsEvaluator_GetMetricRawDependencies", p)
        return tuple(sorted(deps[i].decode() for i in range(p.numRawDependencies)))


class MetricDatabase:
    """libnvperf_host.so, initialised once: the chips it knows and a ChipMetrics per chip."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        self._lib = C.CDLL(str(self.path))
        self._call("NVPW_InitializeHost", _InitializeHost())
        p = _GetSupportedChipNames()
        self._call("NVPW_GetSupportedChipNames", p)
        self.chips: tuple[str, ...] = tuple(
            p.ppChipNames[i].decode() for i in range(p.numChipNames)
        )

    def _status(self, function: str, params: C.Structure) -> int:
        params.structSize = C.sizeof(params)
        fn = getattr(self._lib, function)
        fn.restype = C.c_int
        return fn(C.byref(params))

    def _call(self, function: str, params: C.Structure) -> None:
        status = self._status(function, params)
        if status != 0:
            raise NvperfError(f"{function} returned NVPA_Status {status}")

    def chip(self, name: str) -> ChipMetrics:
        """The metric database of chip `name` (one of `chips`); close it after use."""
        if name not in self.chips:
            raise NvperfError(f"{self.path.name} does not know chip {name!r}")
        return ChipMetrics(self, name)


def library_path() -> Path | None:
    """Where the ncu-report wheel put libnvperf_host.so (found without importing ncu_report)."""
    spec = importlib.util.find_spec("ncu_report")
    if spec is None or not spec.submodule_search_locations:
        return None
    for folder in spec.submodule_search_locations:
        candidate = Path(folder) / LIBRARY_NAME
        if candidate.is_file():
            return candidate
    return None


def ncu_report_version() -> str | None:
    """Version of the installed ncu-report wheel (the database's version), or None."""
    try:
        return metadata.version("ncu-report")
    except metadata.PackageNotFoundError:
        return None


_LOAD_ERROR: list[str] = []


@lru_cache(maxsize=1)
def open_database() -> MetricDatabase | None:
    """The metric database, loaded on first use; None when it cannot be (see load_error())."""
    path = library_path()
    if path is None:
        _LOAD_ERROR.append(f"{LIBRARY_NAME} not found (is the ncu-report package installed?)")
        return None
    try:
        return MetricDatabase(path)
    except (OSError, AttributeError, NvperfError) as exc:
        _LOAD_ERROR.append(f"{path} does not load here: {exc}")
        return None


def load_error() -> str | None:
    """Why open_database() returned None (after it did), else None."""
    return _LOAD_ERROR[-1] if _LOAD_ERROR else None
