// check_indexed_rows (kernels/indexed_rows.h): the shapes every backend's gather_rows / scatter_add_rows checks.
#include "kernels/indexed_rows.h"

namespace rt {

IndexedRows check_indexed_rows(const Tensor& dst, const Tensor& src, const Tensor& index, bool gather, const char* op) {
  RT_CHECK(dst.ndim == 2 && src.ndim == 2, op << ": dst " << dst.shape_str() << " and src " << src.shape_str()
                                              << " must be 2-D (rows, width); view them so");
  RT_CHECK(dst.shape[1] == src.shape[1], op << ": dst " << dst.shape_str() << " and src " << src.shape_str()
                                            << " have rows of different widths");
  for (const Tensor* t : {&dst, &src})
    RT_CHECK(t->dtype == DType::f32 || t->dtype == DType::bf16,
             op << ": " << (t == &dst ? "dst" : "src") << " has dtype " << dtype_name(t->dtype)
                << ", expected f32 or bf16");
  RT_CHECK(dst.device == src.device && index.device == dst.device,
           op << ": dst on " << dst.device.str() << ", src on " << src.device.str() << ", index on "
              << index.device.str() << "; put them on one device");
  check_dtype(index, DType::i32, op, "index");
  if (!gather) check_dtype(dst, DType::f32, op, "dst (the f32 accumulator)");
  IndexedRows g;
  g.width = dst.shape[1];
  g.rows = gather ? dst.shape[0] : src.shape[0];
  g.table_rows = gather ? src.shape[0] : dst.shape[0];
  RT_CHECK(index.numel() == g.rows, op << ": index " << index.shape_str() << " must hold one entry per "
                                       << (gather ? "dst" : "src") << " row (" << g.rows << ")");
  RT_CHECK(g.table_rows < (int64_t(1) << 31), op << ": " << g.table_rows << " rows cannot be indexed by i32");
  for (const Tensor* t : {&dst, &src, &index})
    RT_CHECK(t->defined() || t->numel() == 0, op << ": a tensor of shape " << t->shape_str() << " is not defined");
  return g;
}

}  // namespace rt
