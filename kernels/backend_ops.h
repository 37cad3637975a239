// Declares the per-backend implementations of every op of kernels/op_list.inc, with the same signatures, in
// namespace rt::<backend> (rt::cpu in kernels/cpu/, rt::cuda in kernels/cuda/). kernels/ops.cpp dispatches to
// them on the tensors' device. A backend's copy_cast copies on one device only; ops.cpp crosses devices.
// Included inside the backend namespace, after kernels/ops.h and kernels/attention.h; keep it C++17 (nvcc
// compiles it).
#define RT_OP(ret, name, params, args, first, dispatch) ret name params;
#define RT_ATTN_OP(ret, name, params, args, first, dispatch) ret name params;
#include "kernels/op_list.inc"
