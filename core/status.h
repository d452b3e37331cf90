// absl::Status helpers for user-facing errors: propagate with KELVIN_RETURN_IF_ERROR and
// KELVIN_ASSIGN_OR_RETURN; the top level prints the one clear message.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define KELVIN_STATUS_CONCAT_INNER_(a, b) a##b
#define KELVIN_STATUS_CONCAT_(a, b) KELVIN_STATUS_CONCAT_INNER_(a, b)

#define KELVIN_RETURN_IF_ERROR(expr)                 \
  do {                                               \
    const ::absl::Status kelvin_status_ = (expr);    \
    if (!kelvin_status_.ok()) return kelvin_status_; \
  } while (0)

// KELVIN_ASSIGN_OR_RETURN(auto value, FunctionReturningStatusOr());
#define KELVIN_ASSIGN_OR_RETURN(lhs, expr) \
  KELVIN_ASSIGN_OR_RETURN_IMPL_(KELVIN_STATUS_CONCAT_(kelvin_statusor_, __LINE__), lhs, expr)
#define KELVIN_ASSIGN_OR_RETURN_IMPL_(statusor, lhs, expr) \
  auto statusor = (expr);                                  \
  if (!statusor.ok()) return statusor.status();            \
  lhs = std::move(statusor).value()
