// tpc init-weights: a safetensors checkpoint of seeded random weights under a model's HF
// names, the same values a binary's --random-weights generates (for demos and tests).
#ifndef TPC_DRIVER_INITWEIGHTS_H
#define TPC_DRIVER_INITWEIGHTS_H

#include <cstdint>
#include <optional>
#include <string>

namespace tpc::driver {

/// Writes the weights of the model at `model` (f32, or bf16) from `seed` to `output`; how
/// many tensors, or none with the errors reported.
std::optional<size_t> writeRandomWeights(const std::string &model, const std::string &output,
                                         uint64_t seed, bool bf16);

} // namespace tpc::driver

#endif // TPC_DRIVER_INITWEIGHTS_H
