// TFRecord framing with CRC32C and the scalar Events.
#include "training/metrics/tensorboard_writer.h"

#include <unistd.h>

#include <chrono>
#include <cstring>
#include <filesystem>

#include "absl/strings/str_cat.h"
#include "configs/tensorboard_event.pb.h"
#include "core/io/crc32c.h"
#include "core/status.h"

namespace kelvin::training {
namespace {

double NowSeconds() {
  return std::chrono::duration<double>(std::chrono::system_clock::now().time_since_epoch()).count();
}

std::string LittleEndian(uint64_t value, int bytes) {
  std::string out(static_cast<size_t>(bytes), '\0');
  for (int i = 0; i < bytes; ++i) out[i] = static_cast<char>((value >> (8 * i)) & 0xFF);
  return out;
}

}  // namespace

uint32_t MaskedCrc32c(std::string_view bytes) {
  const uint32_t crc = io::Crc32c(bytes);
  return ((crc >> 15) | (crc << 17)) + 0xa282ead8u;
}

absl::StatusOr<std::unique_ptr<TensorBoardWriter>> TensorBoardWriter::Open(
    const std::string& directory) {
  std::error_code error;
  std::filesystem::create_directories(directory, error);
  if (error) {
    return absl::PermissionDeniedError(absl::StrCat("logging.tensorboard_dir=\"", directory,
                                                    "\": cannot create it: ", error.message()));
  }
  char host[256] = "localhost";
  gethostname(host, sizeof(host) - 1);
  const std::string path =
      absl::StrCat(directory, "/events.out.tfevents.", static_cast<int64_t>(NowSeconds()), ".",
                   host, ".", static_cast<int64_t>(getpid()));
  return std::unique_ptr<TensorBoardWriter>(new TensorBoardWriter(path));
}

absl::Status TensorBoardWriter::Create() {
  file_ = std::fopen(path_.c_str(), "wb");
  if (file_ == nullptr) {
    return absl::PermissionDeniedError(
        absl::StrCat("logging.tensorboard_dir: cannot create ", path_, ": ", std::strerror(errno)));
  }
  tensorboard::Event version;
  version.set_wall_time(NowSeconds());
  version.set_file_version("brain.Event:2");
  return WriteRecord(version.SerializeAsString());
}

TensorBoardWriter::~TensorBoardWriter() {
  if (file_ != nullptr) std::fclose(file_);
}

absl::Status TensorBoardWriter::AddScalar(const std::string& tag, int64_t step, double value) {
  if (file_ == nullptr) {  // the first scalar: the file and its version record, or no file
    const absl::Status created = Create();
    if (!created.ok()) {
      if (file_ != nullptr) std::fclose(file_);
      file_ = nullptr;
      std::remove(path_.c_str());
      return created;
    }
  }
  tensorboard::Event event;
  event.set_wall_time(NowSeconds());
  event.set_step(step);
  tensorboard::Summary::Value* point = event.mutable_summary()->add_value();
  point->set_tag(tag);
  point->set_simple_value(static_cast<float>(value));
  return WriteRecord(event.SerializeAsString());
}

absl::Status TensorBoardWriter::WriteRecord(const std::string& event) {
  const std::string length = LittleEndian(event.size(), 8);
  const std::string record = absl::StrCat(length, LittleEndian(MaskedCrc32c(length), 4), event,
                                          LittleEndian(MaskedCrc32c(event), 4));
  if (std::fwrite(record.data(), 1, record.size(), file_) != record.size() ||
      std::fflush(file_) != 0) {
    return absl::DataLossError(
        absl::StrCat("cannot write TensorBoard events to ", path_, ": ", std::strerror(errno)));
  }
  return absl::OkStatus();
}

}  // namespace kelvin::training
