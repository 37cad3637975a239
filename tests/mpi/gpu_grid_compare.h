// A grid's first step on GPU ranks against one GPU rank's (tests/mpi/test_gpu_model_grid.cpp,
// test_gpu_fp8_grid.cpp): the loss, the whole gradient and the worst gradient tensor, each within its tolerance.
#pragma once
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <string>

#include "tests/gpu/gpu_model_util.h"

namespace rt::test {

struct GridTolerances {
  double loss;    // |loss - ref| / |ref|
  double whole;   // ||g - ref|| / ||ref|| over every gradient
  double tensor;  // the same, per gradient tensor
};

// got against ref within tol (gtest expectations); `print` (the grid's rank 0) prints what it saw under `label`.
inline void expect_grid_matches_one_rank(const StepResult& got, const StepResult& ref, const GridTolerances& tol,
                                         const std::string& label, bool print) {
  ASSERT_TRUE(std::isfinite(got.loss)) << "loss " << got.loss;
  const double loss_err = std::abs(got.loss - ref.loss) / std::abs(ref.loss);
  EXPECT_LE(loss_err, tol.loss) << "loss " << got.loss << " vs one GPU rank " << ref.loss;
  ASSERT_EQ(got.grads.size(), ref.grads.size());
  const GradCompare g = compare_grads(got.grads, ref.grads);
  EXPECT_LE(g.whole, tol.whole);
  EXPECT_LE(g.worst, tol.tensor) << g.worst_name;
  if (print)
    std::printf("[ %s ] loss %.5f vs one GPU rank %.5f (rel %.1e) | grad rel err whole %.1e, worst %.1e (%s)\n",
                label.c_str(), got.loss, ref.loss, loss_err, g.whole, g.worst, g.worst_name.c_str());
}

}  // namespace rt::test
