// Header validation. File layout: u64 little-endian N | N bytes of JSON header | data section
// (the tensors' byte ranges).
#include "core/io/safetensors_header.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <nlohmann/json.hpp>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/io/safetensors_dtypes.h"
#include "core/io/strict_json.h"
#include "core/status.h"

namespace kelvin::io::internal {

static_assert(std::endian::native == std::endian::little,
              "safetensors data is little-endian; Kelvin reads it in place");

namespace {

using Json = nlohmann::json;

constexpr uint64_t kMaxHeaderBytes = 100'000'000;  // the limit of the reference implementation

// `value` as compact JSON, cut to 80 characters, for messages.
std::string Excerpt(const Json& value) {
  std::string text = value.dump(-1, ' ', false, Json::error_handler_t::replace);
  if (text.size() > 80) text = text.substr(0, 77) + "...";
  return text;
}

class HeaderValidator {
 public:
  HeaderValidator(const std::string& path, size_t data_size) : path_(path), data_size_(data_size) {}

  absl::Status Corrupt(absl::StatusCode code, absl::string_view detail) const {
    return absl::Status(code, absl::StrCat(path_, ": ", detail, kRedo));
  }
  absl::Status Invalid(absl::string_view detail) const {
    return Corrupt(absl::StatusCode::kInvalidArgument, detail);
  }
  absl::Status InvalidEntry(absl::string_view name, absl::string_view detail) const {
    return Invalid(absl::StrCat("tensor \"", name, "\": ", detail));
  }

  absl::Status Metadata(const Json& value, std::map<std::string, std::string>* metadata) const {
    if (value.is_null()) return absl::OkStatus();
    if (!value.is_object()) {
      return Invalid(
          absl::StrCat("\"__metadata__\" must be an object of strings, found ", Excerpt(value)));
    }
    for (const auto& [key, text] : value.items()) {
      if (!text.is_string()) {
        return Invalid(absl::StrCat("\"__metadata__\" value of \"", key,
                                    "\" must be a string, found ", Excerpt(text)));
      }
      (*metadata)[key] = text.get<std::string>();
    }
    return absl::OkStatus();
  }

  absl::StatusOr<SafetensorsEntry> Entry(const std::string& name, const Json& value) const {
    if (!value.is_object()) {
      return InvalidEntry(name, absl::StrCat("entry must be an object with \"dtype\", \"shape\" "
                                             "and \"data_offsets\", found ",
                                             Excerpt(value)));
    }
    SafetensorsEntry entry;
    entry.name = name;
    KELVIN_ASSIGN_OR_RETURN(const Json* dtype, Field(name, value, "dtype"));
    if (!dtype->is_string()) {
      return InvalidEntry(name,
                          absl::StrCat("\"dtype\" must be a string, found ", Excerpt(*dtype)));
    }
    entry.dtype_name = dtype->get<std::string>();
    const FileDType* type = FindFileDType(entry.dtype_name);
    if (type == nullptr) {
      return InvalidEntry(name, absl::StrCat("unknown dtype \"", entry.dtype_name,
                                             "\" (safetensors dtypes: ", KnownDTypeNames(), ")"));
    }

    KELVIN_ASSIGN_OR_RETURN(const Json* shape, Field(name, value, "shape"));
    if (!shape->is_array()) {
      return InvalidEntry(name, absl::StrCat("\"shape\" must be an array of non-negative integers, "
                                             "found ",
                                             Excerpt(*shape)));
    }
    int64_t nonzero_product = 1;  // bounds every sub-product of the dims (sizes of slices)
    bool has_zero = false;
    for (const Json& dim : *shape) {
      if (!dim.is_number_integer()) {
        return InvalidEntry(name, absl::StrCat("shape ", Excerpt(*shape), " has dimension ",
                                               Excerpt(dim), ", which is not an integer"));
      }
      if (!dim.is_number_unsigned()) {
        return InvalidEntry(name, absl::StrCat("shape ", Excerpt(*shape),
                                               " has negative dimension ", Excerpt(dim)));
      }
      const uint64_t size = dim.get<uint64_t>();
      if (size > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
          (size > 0 &&
           __builtin_mul_overflow(nonzero_product, static_cast<int64_t>(size), &nonzero_product))) {
        return InvalidEntry(name, absl::StrCat("shape ", Excerpt(*shape), " is too large"));
      }
      has_zero = has_zero || size == 0;
      entry.shape.push_back(static_cast<int64_t>(size));
    }
    const uint64_t numel = has_zero ? 0 : static_cast<uint64_t>(nonzero_product);

    KELVIN_ASSIGN_OR_RETURN(const Json* offsets, Field(name, value, "data_offsets"));
    if (!offsets->is_array() || offsets->size() != 2 || !(*offsets)[0].is_number_unsigned() ||
        !(*offsets)[1].is_number_unsigned()) {
      return InvalidEntry(name, absl::StrCat("\"data_offsets\" must be two non-negative integers "
                                             "[begin, end], found ",
                                             Excerpt(*offsets)));
    }
    const uint64_t begin = (*offsets)[0].get<uint64_t>();
    const uint64_t end = (*offsets)[1].get<uint64_t>();
    if (begin > end) {
      return InvalidEntry(name,
                          absl::StrCat("data_offsets [", begin, ", ", end, "] begin after end"));
    }
    if (end > data_size_) {
      return Corrupt(absl::StatusCode::kDataLoss,
                     absl::StrCat("tensor \"", name, "\": data_offsets [", begin, ", ", end,
                                  "] end past the data section (", data_size_,
                                  " bytes); the file may be truncated"));
    }
    uint64_t bits = 0;
    if (__builtin_mul_overflow(numel, static_cast<uint64_t>(type->bits), &bits) || bits % 8 != 0 ||
        bits / 8 != end - begin) {
      return InvalidEntry(
          name, absl::StrCat("data_offsets [", begin, ", ", end, "] hold ", end - begin,
                             " bytes, but ", entry.dtype_name, " ", ShapeToString(entry.shape),
                             " needs ", numel, " x ", type->bits, " bits"));
    }
    entry.begin = static_cast<size_t>(begin);
    entry.end = static_cast<size_t>(end);
    return entry;
  }

  // The byte ranges must tile the data section exactly, in order of offsets (as the reference
  // implementation requires): no overlap, no gap, nothing after the last tensor.
  absl::Status Tiling(const std::vector<SafetensorsEntry>& entries) const {
    std::vector<const SafetensorsEntry*> by_offset;
    for (const SafetensorsEntry& entry : entries) by_offset.push_back(&entry);
    std::sort(by_offset.begin(), by_offset.end(), [](const auto* a, const auto* b) {
      return std::tie(a->begin, a->end, a->name) < std::tie(b->begin, b->end, b->name);
    });
    size_t covered = 0;  // bytes [0, covered) belong to tensors seen so far
    const SafetensorsEntry* previous = nullptr;
    for (const SafetensorsEntry* entry : by_offset) {
      if (entry->begin > covered) {
        return Invalid(
            absl::StrCat("bytes [", covered, ", ", entry->begin,
                         ") of the data section belong to no tensor (a gap ",
                         previous ? absl::StrCat("after \"", previous->name, "\" and ") : "",
                         "before \"", entry->name, "\")"));
      }
      if (entry->begin < covered) {
        return Invalid(absl::StrCat("tensor \"", entry->name, "\": data_offsets [", entry->begin,
                                    ", ", entry->end, "] overlap \"", previous->name, "\" [",
                                    previous->begin, ", ", previous->end, "]"));
      }
      covered = entry->end;
      previous = entry;
    }
    if (covered != data_size_) {
      return Invalid(absl::StrCat("bytes [", covered, ", ", data_size_,
                                  ") at the end of the data section belong to no tensor"));
    }
    return absl::OkStatus();
  }

 private:
  absl::StatusOr<const Json*> Field(const std::string& name, const Json& entry,
                                    const char* key) const {
    const auto it = entry.find(key);
    if (it == entry.end()) {
      return InvalidEntry(name, absl::StrCat("missing \"", key, "\" in ", Excerpt(entry)));
    }
    return &*it;
  }

  const std::string& path_;
  size_t data_size_;
};

}  // namespace

absl::StatusOr<SafetensorsHeader> ParseSafetensorsHeader(const MappedFile& file) {
  const std::string& path = file.path();
  if (file.size() < 8) {
    return absl::DataLossError(absl::StrCat(path, ": file is ", file.size(),
                                            " bytes, shorter than the 8-byte header length that "
                                            "starts a safetensors file",
                                            kRedo));
  }
  const uint64_t header_bytes = LoadUnaligned<uint64_t>(file.data());
  if (header_bytes > kMaxHeaderBytes) {
    return absl::InvalidArgumentError(absl::StrCat(path, ": header length ", header_bytes,
                                                   " bytes is absurd (the limit is ",
                                                   kMaxHeaderBytes, ")", kRedo));
  }
  if (header_bytes > file.size() - 8) {
    return absl::DataLossError(absl::StrCat(path, ": header length ", header_bytes,
                                            " bytes runs past the end of the file (", file.size(),
                                            " bytes); the file is truncated", kRedo));
  }
  const size_t data_offset = 8 + static_cast<size_t>(header_bytes);
  const std::string_view header_text(file.data() + 8, static_cast<size_t>(header_bytes));
  absl::StatusOr<Json> header = ParseStrictJson(header_text, path, "tensor name");
  if (!header.ok()) {
    return absl::Status(header.status().code(), absl::StrCat(header.status().message(), kRedo));
  }
  HeaderValidator validator(path, file.size() - data_offset);
  if (!header->is_object()) {
    return validator.Invalid(
        absl::StrCat("the JSON header must be an object {\"tensor name\": "
                     "{\"dtype\", \"shape\", \"data_offsets\"}}, found ",
                     header->type_name()));
  }
  SafetensorsHeader parsed;
  parsed.data_offset = data_offset;  // entries in key order, i.e. sorted by name (std::map)
  for (const auto& [name, value] : header->items()) {
    if (name == "__metadata__") {
      KELVIN_RETURN_IF_ERROR(validator.Metadata(value, &parsed.metadata));
      continue;
    }
    KELVIN_ASSIGN_OR_RETURN(SafetensorsEntry entry, validator.Entry(name, value));
    parsed.entries.push_back(std::move(entry));
  }
  KELVIN_RETURN_IF_ERROR(validator.Tiling(parsed.entries));
  return parsed;
}

}  // namespace kelvin::io::internal
