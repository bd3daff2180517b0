// IDX files (the MNIST / Fashion-MNIST format), plain or gzip-compressed, as uint8 tensors.
//
//   KD_ASSIGN_OR_RETURN(at::Tensor images,
//                       kd::ReadIdxFile(".../train-images-idx3-ubyte.gz"));  // (60000, 28, 28)
//
// The format: a big-endian header, bytes 0 and 1 zero, byte 2 the element type (0x08: unsigned
// byte), byte 3 the number of dimensions; then one big-endian uint32 per dimension; then the
// elements, row-major. Only unsigned-byte files are read (the only type MNIST-like datasets use).
//
// Errors: NotFound for a missing file; DataLoss naming the file and what is wrong for a bad
// magic number, an unsupported type, a truncated or over-long payload or a corrupt gzip stream.
#ifndef LIBKD_DISTILL_DATA_IDX_FILE_H_
#define LIBKD_DISTILL_DATA_IDX_FILE_H_

#include <string>

#include <ATen/core/Tensor.h>

#include "absl/status/statusor.h"

namespace kd {

// The elements of the IDX file at `path` (gzip-compressed or not) as a uint8 CPU tensor with
// the file's dimensions.
absl::StatusOr<at::Tensor> ReadIdxFile(const std::string& path);

}  // namespace kd

#endif  // LIBKD_DISTILL_DATA_IDX_FILE_H_
