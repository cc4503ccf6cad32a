from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class Direction(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DIRECTION_UNSPECIFIED: _ClassVar[Direction]
    DIRECTION_FORWARD: _ClassVar[Direction]
    DIRECTION_BACKWARD_DATA: _ClassVar[Direction]
    DIRECTION_BACKWARD_WEIGHT: _ClassVar[Direction]

class DataType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    DATA_TYPE_UNSPECIFIED: _ClassVar[DataType]
    DATA_TYPE_BF16: _ClassVar[DataType]
    DATA_TYPE_FP16: _ClassVar[DataType]
    DATA_TYPE_FP32: _ClassVar[DataType]

class Layout(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    LAYOUT_UNSPECIFIED: _ClassVar[Layout]
    LAYOUT_NHWGC: _ClassVar[Layout]

class Family(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    FAMILY_UNSPECIFIED: _ClassVar[Family]
    FAMILY_IGEMM: _ClassVar[Family]
    FAMILY_GMERGE: _ClassVar[Family]
    FAMILY_GEMM1X1: _ClassVar[Family]
    FAMILY_DIRECT: _ClassVar[Family]
    FAMILY_TMA: _ClassVar[Family]
    FAMILY_DWROLL: _ClassVar[Family]
    FAMILY_GWALK: _ClassVar[Family]
    FAMILY_DWROW: _ClassVar[Family]
    FAMILY_DWRUN: _ClassVar[Family]
    FAMILY_HALO: _ClassVar[Family]

class SelectionPolicy(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SELECTION_POLICY_UNSPECIFIED: _ClassVar[SelectionPolicy]
    SELECTION_POLICY_DEFAULT: _ClassVar[SelectionPolicy]
    SELECTION_POLICY_TUNING_DB_ONLY: _ClassVar[SelectionPolicy]
    SELECTION_POLICY_MODEL_ONLY: _ClassVar[SelectionPolicy]
    SELECTION_POLICY_ANALYTIC_ONLY: _ClassVar[SelectionPolicy]
    SELECTION_POLICY_AUTOTUNE: _ClassVar[SelectionPolicy]

class SelectionSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    SELECTION_SOURCE_UNSPECIFIED: _ClassVar[SelectionSource]
    SELECTION_SOURCE_TUNING_DB: _ClassVar[SelectionSource]
    SELECTION_SOURCE_MODEL: _ClassVar[SelectionSource]
    SELECTION_SOURCE_ANALYTIC: _ClassVar[SelectionSource]
    SELECTION_SOURCE_AUTOTUNE: _ClassVar[SelectionSource]

class ExecutionTarget(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EXECUTION_TARGET_UNSPECIFIED: _ClassVar[ExecutionTarget]
    EXECUTION_TARGET_GPU: _ClassVar[ExecutionTarget]
    EXECUTION_TARGET_CPU_REFERENCE: _ClassVar[ExecutionTarget]

class MeasurementStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MEASUREMENT_STATUS_UNSPECIFIED: _ClassVar[MeasurementStatus]
    MEASUREMENT_STATUS_OK: _ClassVar[MeasurementStatus]
    MEASUREMENT_STATUS_ERROR: _ClassVar[MeasurementStatus]
    MEASUREMENT_STATUS_WRONG: _ClassVar[MeasurementStatus]
    MEASUREMENT_STATUS_FAULT: _ClassVar[MeasurementStatus]

class ModelKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    MODEL_KIND_UNSPECIFIED: _ClassVar[ModelKind]
    MODEL_KIND_TRAINED: _ClassVar[ModelKind]
    MODEL_KIND_ANALYTIC: _ClassVar[ModelKind]
DIRECTION_UNSPECIFIED: Direction
DIRECTION_FORWARD: Direction
DIRECTION_BACKWARD_DATA: Direction
DIRECTION_BACKWARD_WEIGHT: Direction
DATA_TYPE_UNSPECIFIED: DataType
DATA_TYPE_BF16: DataType
DATA_TYPE_FP16: DataType
DATA_TYPE_FP32: DataType
LAYOUT_UNSPECIFIED: Layout
LAYOUT_NHWGC: Layout
FAMILY_UNSPECIFIED: Family
FAMILY_IGEMM: Family
FAMILY_GMERGE: Family
FAMILY_GEMM1X1: Family
FAMILY_DIRECT: Family
FAMILY_TMA: Family
FAMILY_DWROLL: Family
FAMILY_GWALK: Family
FAMILY_DWROW: Family
FAMILY_DWRUN: Family
FAMILY_HALO: Family
SELECTION_POLICY_UNSPECIFIED: SelectionPolicy
SELECTION_POLICY_DEFAULT: SelectionPolicy
SELECTION_POLICY_TUNING_DB_ONLY: SelectionPolicy
SELECTION_POLICY_MODEL_ONLY: SelectionPolicy
SELECTION_POLICY_ANALYTIC_ONLY: SelectionPolicy
SELECTION_POLICY_AUTOTUNE: SelectionPolicy
SELECTION_SOURCE_UNSPECIFIED: SelectionSource
SELECTION_SOURCE_TUNING_DB: SelectionSource
SELECTION_SOURCE_MODEL: SelectionSource
SELECTION_SOURCE_ANALYTIC: SelectionSource
SELECTION_SOURCE_AUTOTUNE: SelectionSource
EXECUTION_TARGET_UNSPECIFIED: ExecutionTarget
EXECUTION_TARGET_GPU: ExecutionTarget
EXECUTION_TARGET_CPU_REFERENCE: ExecutionTarget
MEASUREMENT_STATUS_UNSPECIFIED: MeasurementStatus
MEASUREMENT_STATUS_OK: MeasurementStatus
MEASUREMENT_STATUS_ERROR: MeasurementStatus
MEASUREMENT_STATUS_WRONG: MeasurementStatus
MEASUREMENT_STATUS_FAULT: MeasurementStatus
MODEL_KIND_UNSPECIFIED: ModelKind
MODEL_KIND_TRAINED: ModelKind
MODEL_KIND_ANALYTIC: ModelKind

class Problem(_message.Message):
    __slots__ = ("direction", "dtype", "batch", "groups", "in_channels", "out_channels", "input_size", "filter_size", "stride", "dilation", "pad_begin", "pad_end", "layout")
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    BATCH_FIELD_NUMBER: _ClassVar[int]
    GROUPS_FIELD_NUMBER: _ClassVar[int]
    IN_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    OUT_CHANNELS_FIELD_NUMBER: _ClassVar[int]
    INPUT_SIZE_FIELD_NUMBER: _ClassVar[int]
    FILTER_SIZE_FIELD_NUMBER: _ClassVar[int]
    STRIDE_FIELD_NUMBER: _ClassVar[int]
    DILATION_FIELD_NUMBER: _ClassVar[int]
    PAD_BEGIN_FIELD_NUMBER: _ClassVar[int]
    PAD_END_FIELD_NUMBER: _ClassVar[int]
    LAYOUT_FIELD_NUMBER: _ClassVar[int]
    direction: Direction
    dtype: DataType
    batch: int
    groups: int
    in_channels: int
    out_channels: int
    input_size: _containers.RepeatedScalarFieldContainer[int]
    filter_size: _containers.RepeatedScalarFieldContainer[int]
    stride: _containers.RepeatedScalarFieldContainer[int]
    dilation: _containers.RepeatedScalarFieldContainer[int]
    pad_begin: _containers.RepeatedScalarFieldContainer[int]
    pad_end: _containers.RepeatedScalarFieldContainer[int]
    layout: Layout
    def __init__(self, direction: _Optional[_Union[Direction, str]] = ..., dtype: _Optional[_Union[DataType, str]] = ..., batch: _Optional[int] = ..., groups: _Optional[int] = ..., in_channels: _Optional[int] = ..., out_channels: _Optional[int] = ..., input_size: _Optional[_Iterable[int]] = ..., filter_size: _Optional[_Iterable[int]] = ..., stride: _Optional[_Iterable[int]] = ..., dilation: _Optional[_Iterable[int]] = ..., pad_begin: _Optional[_Iterable[int]] = ..., pad_end: _Optional[_Iterable[int]] = ..., layout: _Optional[_Union[Layout, str]] = ...) -> None: ...

class Tensor(_message.Message):
    __slots__ = ("dtype", "shape", "data")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    DATA_FIELD_NUMBER: _ClassVar[int]
    dtype: DataType
    shape: _containers.RepeatedScalarFieldContainer[int]
    data: bytes
    def __init__(self, dtype: _Optional[_Union[DataType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., data: _Optional[bytes] = ...) -> None: ...

class ModelRef(_message.Message):
    __slots__ = ("name", "version")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ...) -> None: ...

class ModelInfo(_message.Message):
    __slots__ = ("name", "version", "kind", "arch", "dtypes", "directions", "feature_count", "description")
    NAME_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    DTYPES_FIELD_NUMBER: _ClassVar[int]
    DIRECTIONS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_COUNT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    name: str
    version: str
    kind: ModelKind
    arch: str
    dtypes: _containers.RepeatedScalarFieldContainer[DataType]
    directions: _containers.RepeatedScalarFieldContainer[Direction]
    feature_count: int
    description: str
    def __init__(self, name: _Optional[str] = ..., version: _Optional[str] = ..., kind: _Optional[_Union[ModelKind, str]] = ..., arch: _Optional[str] = ..., dtypes: _Optional[_Iterable[_Union[DataType, str]]] = ..., directions: _Optional[_Iterable[_Union[Direction, str]]] = ..., feature_count: _Optional[int] = ..., description: _Optional[str] = ...) -> None: ...

class Candidate(_message.Message):
    __slots__ = ("kernel", "family", "predicted_us", "measured_us")
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_US_FIELD_NUMBER: _ClassVar[int]
    MEASURED_US_FIELD_NUMBER: _ClassVar[int]
    kernel: str
    family: Family
    predicted_us: float
    measured_us: float
    def __init__(self, kernel: _Optional[str] = ..., family: _Optional[_Union[Family, str]] = ..., predicted_us: _Optional[float] = ..., measured_us: _Optional[float] = ...) -> None: ...

class SelectRequest(_message.Message):
    __slots__ = ("problem", "policy", "top_k", "families", "model")
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    POLICY_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FAMILIES_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    problem: Problem
    policy: SelectionPolicy
    top_k: int
    families: _containers.RepeatedScalarFieldContainer[Family]
    model: ModelRef
    def __init__(self, problem: _Optional[_Union[Problem, _Mapping]] = ..., policy: _Optional[_Union[SelectionPolicy, str]] = ..., top_k: _Optional[int] = ..., families: _Optional[_Iterable[_Union[Family, str]]] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ...) -> None: ...

class SelectResponse(_message.Message):
    __slots__ = ("candidates", "source", "model", "candidates_considered", "problem_key", "cached")
    CANDIDATES_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    CANDIDATES_CONSIDERED_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_KEY_FIELD_NUMBER: _ClassVar[int]
    CACHED_FIELD_NUMBER: _ClassVar[int]
    candidates: _containers.RepeatedCompositeFieldContainer[Candidate]
    source: SelectionSource
    model: ModelRef
    candidates_considered: int
    problem_key: str
    cached: bool
    def __init__(self, candidates: _Optional[_Iterable[_Union[Candidate, _Mapping]]] = ..., source: _Optional[_Union[SelectionSource, str]] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., candidates_considered: _Optional[int] = ..., problem_key: _Optional[str] = ..., cached: _Optional[bool] = ...) -> None: ...

class RunInputs(_message.Message):
    __slots__ = ("first", "second")
    FIRST_FIELD_NUMBER: _ClassVar[int]
    SECOND_FIELD_NUMBER: _ClassVar[int]
    first: Tensor
    second: Tensor
    def __init__(self, first: _Optional[_Union[Tensor, _Mapping]] = ..., second: _Optional[_Union[Tensor, _Mapping]] = ...) -> None: ...

class SharedMemoryTensor(_message.Message):
    __slots__ = ("dtype", "shape", "offset")
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    SHAPE_FIELD_NUMBER: _ClassVar[int]
    OFFSET_FIELD_NUMBER: _ClassVar[int]
    dtype: DataType
    shape: _containers.RepeatedScalarFieldContainer[int]
    offset: int
    def __init__(self, dtype: _Optional[_Union[DataType, str]] = ..., shape: _Optional[_Iterable[int]] = ..., offset: _Optional[int] = ...) -> None: ...

class SharedMemoryInputs(_message.Message):
    __slots__ = ("segment", "first", "second")
    SEGMENT_FIELD_NUMBER: _ClassVar[int]
    FIRST_FIELD_NUMBER: _ClassVar[int]
    SECOND_FIELD_NUMBER: _ClassVar[int]
    segment: str
    first: SharedMemoryTensor
    second: SharedMemoryTensor
    def __init__(self, segment: _Optional[str] = ..., first: _Optional[_Union[SharedMemoryTensor, _Mapping]] = ..., second: _Optional[_Union[SharedMemoryTensor, _Mapping]] = ...) -> None: ...

class GenerateInputs(_message.Message):
    __slots__ = ("seed",)
    SEED_FIELD_NUMBER: _ClassVar[int]
    seed: int
    def __init__(self, seed: _Optional[int] = ...) -> None: ...

class RunRequest(_message.Message):
    __slots__ = ("problem", "kernel", "tensors", "generate", "shared_memory", "return_inputs")
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    TENSORS_FIELD_NUMBER: _ClassVar[int]
    GENERATE_FIELD_NUMBER: _ClassVar[int]
    SHARED_MEMORY_FIELD_NUMBER: _ClassVar[int]
    RETURN_INPUTS_FIELD_NUMBER: _ClassVar[int]
    problem: Problem
    kernel: str
    tensors: RunInputs
    generate: GenerateInputs
    shared_memory: SharedMemoryInputs
    return_inputs: bool
    def __init__(self, problem: _Optional[_Union[Problem, _Mapping]] = ..., kernel: _Optional[str] = ..., tensors: _Optional[_Union[RunInputs, _Mapping]] = ..., generate: _Optional[_Union[GenerateInputs, _Mapping]] = ..., shared_memory: _Optional[_Union[SharedMemoryInputs, _Mapping]] = ..., return_inputs: _Optional[bool] = ...) -> None: ...

class RunResponse(_message.Message):
    __slots__ = ("output", "kernel", "elapsed_us", "executed_on", "selection_source", "inputs")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_US_FIELD_NUMBER: _ClassVar[int]
    EXECUTED_ON_FIELD_NUMBER: _ClassVar[int]
    SELECTION_SOURCE_FIELD_NUMBER: _ClassVar[int]
    INPUTS_FIELD_NUMBER: _ClassVar[int]
    output: Tensor
    kernel: str
    elapsed_us: float
    executed_on: ExecutionTarget
    selection_source: SelectionSource
    inputs: RunInputs
    def __init__(self, output: _Optional[_Union[Tensor, _Mapping]] = ..., kernel: _Optional[str] = ..., elapsed_us: _Optional[float] = ..., executed_on: _Optional[_Union[ExecutionTarget, str]] = ..., selection_source: _Optional[_Union[SelectionSource, str]] = ..., inputs: _Optional[_Union[RunInputs, _Mapping]] = ...) -> None: ...

class BenchmarkRequest(_message.Message):
    __slots__ = ("problem", "kernels", "top_k", "families", "repeats")
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    TOP_K_FIELD_NUMBER: _ClassVar[int]
    FAMILIES_FIELD_NUMBER: _ClassVar[int]
    REPEATS_FIELD_NUMBER: _ClassVar[int]
    problem: Problem
    kernels: _containers.RepeatedScalarFieldContainer[str]
    top_k: int
    families: _containers.RepeatedScalarFieldContainer[Family]
    repeats: int
    def __init__(self, problem: _Optional[_Union[Problem, _Mapping]] = ..., kernels: _Optional[_Iterable[str]] = ..., top_k: _Optional[int] = ..., families: _Optional[_Iterable[_Union[Family, str]]] = ..., repeats: _Optional[int] = ...) -> None: ...

class KernelMeasurement(_message.Message):
    __slots__ = ("kernel", "median_us", "min_us", "status", "relative_error", "message", "index", "total", "predicted_us", "graph_us")
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    MEDIAN_US_FIELD_NUMBER: _ClassVar[int]
    MIN_US_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RELATIVE_ERROR_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TOTAL_FIELD_NUMBER: _ClassVar[int]
    PREDICTED_US_FIELD_NUMBER: _ClassVar[int]
    GRAPH_US_FIELD_NUMBER: _ClassVar[int]
    kernel: str
    median_us: float
    min_us: float
    status: MeasurementStatus
    relative_error: float
    message: str
    index: int
    total: int
    predicted_us: float
    graph_us: float
    def __init__(self, kernel: _Optional[str] = ..., median_us: _Optional[float] = ..., min_us: _Optional[float] = ..., status: _Optional[_Union[MeasurementStatus, str]] = ..., relative_error: _Optional[float] = ..., message: _Optional[str] = ..., index: _Optional[int] = ..., total: _Optional[int] = ..., predicted_us: _Optional[float] = ..., graph_us: _Optional[float] = ...) -> None: ...

class BenchmarkSummary(_message.Message):
    __slots__ = ("oracle_kernel", "oracle_us", "selected_kernel", "selected_us", "selection_efficiency", "selection_source", "model", "measured", "failed", "gpu_name")
    ORACLE_KERNEL_FIELD_NUMBER: _ClassVar[int]
    ORACLE_US_FIELD_NUMBER: _ClassVar[int]
    SELECTED_KERNEL_FIELD_NUMBER: _ClassVar[int]
    SELECTED_US_FIELD_NUMBER: _ClassVar[int]
    SELECTION_EFFICIENCY_FIELD_NUMBER: _ClassVar[int]
    SELECTION_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MEASURED_FIELD_NUMBER: _ClassVar[int]
    FAILED_FIELD_NUMBER: _ClassVar[int]
    GPU_NAME_FIELD_NUMBER: _ClassVar[int]
    oracle_kernel: str
    oracle_us: float
    selected_kernel: str
    selected_us: float
    selection_efficiency: float
    selection_source: SelectionSource
    model: ModelRef
    measured: int
    failed: int
    gpu_name: str
    def __init__(self, oracle_kernel: _Optional[str] = ..., oracle_us: _Optional[float] = ..., selected_kernel: _Optional[str] = ..., selected_us: _Optional[float] = ..., selection_efficiency: _Optional[float] = ..., selection_source: _Optional[_Union[SelectionSource, str]] = ..., model: _Optional[_Union[ModelRef, _Mapping]] = ..., measured: _Optional[int] = ..., failed: _Optional[int] = ..., gpu_name: _Optional[str] = ...) -> None: ...

class BenchmarkResponse(_message.Message):
    __slots__ = ("measurement", "summary")
    MEASUREMENT_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    measurement: KernelMeasurement
    summary: BenchmarkSummary
    def __init__(self, measurement: _Optional[_Union[KernelMeasurement, _Mapping]] = ..., summary: _Optional[_Union[BenchmarkSummary, _Mapping]] = ...) -> None: ...

class ListKernelsRequest(_message.Message):
    __slots__ = ("direction", "dtype", "ndim", "families", "problem", "include_unsupported")
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    NDIM_FIELD_NUMBER: _ClassVar[int]
    FAMILIES_FIELD_NUMBER: _ClassVar[int]
    PROBLEM_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_UNSUPPORTED_FIELD_NUMBER: _ClassVar[int]
    direction: Direction
    dtype: DataType
    ndim: int
    families: _containers.RepeatedScalarFieldContainer[Family]
    problem: Problem
    include_unsupported: bool
    def __init__(self, direction: _Optional[_Union[Direction, str]] = ..., dtype: _Optional[_Union[DataType, str]] = ..., ndim: _Optional[int] = ..., families: _Optional[_Iterable[_Union[Family, str]]] = ..., problem: _Optional[_Union[Problem, _Mapping]] = ..., include_unsupported: _Optional[bool] = ...) -> None: ...

class KernelInfo(_message.Message):
    __slots__ = ("name", "direction", "dtype", "ndim", "family", "block_m", "block_n", "block_k", "num_warps", "num_stages", "group_m", "split_k", "merge", "vec", "index64", "supported", "reason", "quarantined")
    NAME_FIELD_NUMBER: _ClassVar[int]
    DIRECTION_FIELD_NUMBER: _ClassVar[int]
    DTYPE_FIELD_NUMBER: _ClassVar[int]
    NDIM_FIELD_NUMBER: _ClassVar[int]
    FAMILY_FIELD_NUMBER: _ClassVar[int]
    BLOCK_M_FIELD_NUMBER: _ClassVar[int]
    BLOCK_N_FIELD_NUMBER: _ClassVar[int]
    BLOCK_K_FIELD_NUMBER: _ClassVar[int]
    NUM_WARPS_FIELD_NUMBER: _ClassVar[int]
    NUM_STAGES_FIELD_NUMBER: _ClassVar[int]
    GROUP_M_FIELD_NUMBER: _ClassVar[int]
    SPLIT_K_FIELD_NUMBER: _ClassVar[int]
    MERGE_FIELD_NUMBER: _ClassVar[int]
    VEC_FIELD_NUMBER: _ClassVar[int]
    INDEX64_FIELD_NUMBER: _ClassVar[int]
    SUPPORTED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    name: str
    direction: Direction
    dtype: DataType
    ndim: int
    family: Family
    block_m: int
    block_n: int
    block_k: int
    num_warps: int
    num_stages: int
    group_m: int
    split_k: int
    merge: int
    vec: int
    index64: bool
    supported: bool
    reason: str
    quarantined: bool
    def __init__(self, name: _Optional[str] = ..., direction: _Optional[_Union[Direction, str]] = ..., dtype: _Optional[_Union[DataType, str]] = ..., ndim: _Optional[int] = ..., family: _Optional[_Union[Family, str]] = ..., block_m: _Optional[int] = ..., block_n: _Optional[int] = ..., block_k: _Optional[int] = ..., num_warps: _Optional[int] = ..., num_stages: _Optional[int] = ..., group_m: _Optional[int] = ..., split_k: _Optional[int] = ..., merge: _Optional[int] = ..., vec: _Optional[int] = ..., index64: _Optional[bool] = ..., supported: _Optional[bool] = ..., reason: _Optional[str] = ..., quarantined: _Optional[bool] = ...) -> None: ...

class ListKernelsResponse(_message.Message):
    __slots__ = ("kernels", "source")
    KERNELS_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    kernels: _containers.RepeatedCompositeFieldContainer[KernelInfo]
    source: str
    def __init__(self, kernels: _Optional[_Iterable[_Union[KernelInfo, _Mapping]]] = ..., source: _Optional[str] = ...) -> None: ...

class ListModelsRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class ListModelsResponse(_message.Message):
    __slots__ = ("models",)
    MODELS_FIELD_NUMBER: _ClassVar[int]
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    def __init__(self, models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ...) -> None: ...

class GetServerInfoRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerInfoResponse(_message.Message):
    __slots__ = ("has_gpu", "gpu_count", "gpu_name", "arch", "device_spec", "tiledispatch_version", "torch_version", "triton_version", "cuda_version", "driver_version", "python_version", "grpc_version", "registry_size", "registry_source", "models", "quarantined_kernels", "tuning_db_rows", "max_message_bytes")
    HAS_GPU_FIELD_NUMBER: _ClassVar[int]
    GPU_COUNT_FIELD_NUMBER: _ClassVar[int]
    GPU_NAME_FIELD_NUMBER: _ClassVar[int]
    ARCH_FIELD_NUMBER: _ClassVar[int]
    DEVICE_SPEC_FIELD_NUMBER: _ClassVar[int]
    TILEDISPATCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    TORCH_VERSION_FIELD_NUMBER: _ClassVar[int]
    TRITON_VERSION_FIELD_NUMBER: _ClassVar[int]
    CUDA_VERSION_FIELD_NUMBER: _ClassVar[int]
    DRIVER_VERSION_FIELD_NUMBER: _ClassVar[int]
    PYTHON_VERSION_FIELD_NUMBER: _ClassVar[int]
    GRPC_VERSION_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_SIZE_FIELD_NUMBER: _ClassVar[int]
    REGISTRY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_KERNELS_FIELD_NUMBER: _ClassVar[int]
    TUNING_DB_ROWS_FIELD_NUMBER: _ClassVar[int]
    MAX_MESSAGE_BYTES_FIELD_NUMBER: _ClassVar[int]
    has_gpu: bool
    gpu_count: int
    gpu_name: str
    arch: str
    device_spec: str
    tiledispatch_version: str
    torch_version: str
    triton_version: str
    cuda_version: str
    driver_version: str
    python_version: str
    grpc_version: str
    registry_size: int
    registry_source: str
    models: _containers.RepeatedCompositeFieldContainer[ModelInfo]
    quarantined_kernels: int
    tuning_db_rows: int
    max_message_bytes: int
    def __init__(self, has_gpu: _Optional[bool] = ..., gpu_count: _Optional[int] = ..., gpu_name: _Optional[str] = ..., arch: _Optional[str] = ..., device_spec: _Optional[str] = ..., tiledispatch_version: _Optional[str] = ..., torch_version: _Optional[str] = ..., triton_version: _Optional[str] = ..., cuda_version: _Optional[str] = ..., driver_version: _Optional[str] = ..., python_version: _Optional[str] = ..., grpc_version: _Optional[str] = ..., registry_size: _Optional[int] = ..., registry_source: _Optional[str] = ..., models: _Optional[_Iterable[_Union[ModelInfo, _Mapping]]] = ..., quarantined_kernels: _Optional[int] = ..., tuning_db_rows: _Optional[int] = ..., max_message_bytes: _Optional[int] = ...) -> None: ...

class LiftQuarantineRequest(_message.Message):
    __slots__ = ("kernel",)
    KERNEL_FIELD_NUMBER: _ClassVar[int]
    kernel: str
    def __init__(self, kernel: _Optional[str] = ...) -> None: ...

class LiftQuarantineResponse(_message.Message):
    __slots__ = ("was_quarantined", "reason", "quarantined_kernels")
    WAS_QUARANTINED_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    QUARANTINED_KERNELS_FIELD_NUMBER: _ClassVar[int]
    was_quarantined: bool
    reason: str
    quarantined_kernels: int
    def __init__(self, was_quarantined: _Optional[bool] = ..., reason: _Optional[str] = ..., quarantined_kernels: _Optional[int] = ...) -> None: ...
