#include "support.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <iterator>
#include <sstream>

#include "voxgate_example/rpc_status.pb.h"

namespace vgx {

namespace {

uint16_t U16(const std::string& b, size_t pos) {
  return static_cast<uint16_t>(static_cast<uint8_t>(b[pos]) | static_cast<uint8_t>(b[pos + 1]) << 8);
}

uint32_t U32(const std::string& b, size_t pos) {
  return static_cast<uint32_t>(U16(b, pos)) | static_cast<uint32_t>(U16(b, pos + 2)) << 16;
}

constexpr uint16_t kFormatPcm = 1, kFormatAlaw = 6, kFormatMulaw = 7, kFormatExtensible = 0xfffe;

bool ParseWav(const std::string& data, Audio* out, std::string* error) {
  uint16_t format = 0, channels = 0, bits = 0;
  uint32_t rate = 0;
  bool have_fmt = false, have_data = false;
  std::string samples;
  for (size_t pos = 12; pos + 8 <= data.size();) {
    const std::string id = data.substr(pos, 4);
    const size_t size = U32(data, pos + 4);
    const size_t body = pos + 8;
    const size_t end = std::min(data.size(), body + size);  // a truncated last chunk: what is there
    if (id == "fmt ") {
      if (end - body < 16) {
        *error = "short fmt chunk";
        return false;
      }
      format = U16(data, body);
      channels = U16(data, body + 2);
      rate = U32(data, body + 4);
      bits = U16(data, body + 14);
      if (format == kFormatExtensible && end - body >= 26) format = U16(data, body + 24);  // sub-format GUID
      have_fmt = true;
    } else if (id == "data") {
      samples = data.substr(body, end - body);
      have_data = true;
    }
    pos = body + size + (size % 2);  // chunks are word-aligned
  }
  if (!have_fmt || !have_data) {
    *error = "WAV file without fmt or data chunk";
    return false;
  }
  if (channels < 1) {
    *error = "WAV file with no channels";
    return false;
  }
  out->sample_rate = static_cast<int>(rate);
  out->source_channels = channels;
  if ((format == kFormatMulaw || format == kFormatAlaw) && bits == 8) {
    if (channels != 1) {
      *error = "G.711 WAV files must be mono (downmixing is done on 16-bit PCM only)";
      return false;
    }
    out->encoding = format == kFormatMulaw ? Encoding::kMulaw : Encoding::kAlaw;
    out->bytes = std::move(samples);
    return true;
  }
  if (format != kFormatPcm || bits != 16) {
    std::ostringstream msg;
    msg << "unsupported WAV encoding (format " << format << ", " << bits
        << " bits): 16-bit PCM, mu-law or A-law only";
    *error = msg.str();
    return false;
  }
  out->encoding = Encoding::kLinear16;
  const size_t frames = samples.size() / (2u * channels);
  out->bytes.resize(2 * frames);
  for (size_t i = 0; i < frames; ++i) {
    int sum = 0;
    for (size_t c = 0; c < channels; ++c) sum += static_cast<int16_t>(U16(samples, 2 * (i * channels + c)));
    const auto mono = static_cast<uint16_t>(static_cast<int16_t>(sum / static_cast<int>(channels)));
    out->bytes[2 * i] = static_cast<char>(mono & 0xff);
    out->bytes[2 * i + 1] = static_cast<char>(mono >> 8);
  }
  return true;
}

}  // namespace

bool ParseEncoding(const std::string& name, Encoding* out) {
  if (name == "linear16" || name == "pcm" || name == "linear_pcm") {
    *out = Encoding::kLinear16;
  } else if (name == "mulaw" || name == "ulaw" || name == "g711u") {
    *out = Encoding::kMulaw;
  } else if (name == "alaw" || name == "g711a") {
    *out = Encoding::kAlaw;
  } else {
    return false;
  }
  return true;
}

int BytesPerSample(Encoding encoding) { return encoding == Encoding::kLinear16 ? 2 : 1; }

bool ReadAudio(const std::string& path, Encoding raw_encoding, int raw_rate, Audio* out, std::string* error) {
  std::ifstream file(path, std::ios::binary);
  if (!file) {
    *error = std::strerror(errno);
    return false;
  }
  std::string data((std::istreambuf_iterator<char>(file)), std::istreambuf_iterator<char>());
  if (file.bad()) {
    *error = std::strerror(errno);
    return false;
  }
  if (data.size() >= 12 && data.compare(0, 4, "RIFF") == 0 && data.compare(8, 4, "WAVE") == 0) {
    return ParseWav(data, out, error);
  }
  if (raw_rate <= 0) {
    *error = "no WAV header, so raw audio is assumed and --sample-rate is required";
    return false;
  }
  out->encoding = raw_encoding;
  out->sample_rate = raw_rate;
  out->source_channels = 1;
  const size_t width = BytesPerSample(raw_encoding);
  out->bytes = data.substr(0, data.size() - data.size() % width);
  return true;
}

std::vector<std::string> Chunks(const Audio& audio, int ms) {
  const size_t width = BytesPerSample(audio.encoding);
  const size_t size = std::max<size_t>(1, static_cast<size_t>(audio.sample_rate) * ms / 1000) * width;
  std::vector<std::string> out;
  for (size_t pos = 0; pos < audio.bytes.size(); pos += size) out.push_back(audio.bytes.substr(pos, size));
  return out;
}

bool Pacer::WaitFor(double audio_seconds) {
  std::unique_lock<std::mutex> lock(mu_);
  if (speed_ > 0) {
    const auto due = start_ + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                  std::chrono::duration<double>(audio_seconds / speed_));
    cv_.wait_until(lock, due, [this] { return stopped_; });
  }
  return !stopped_;
}

void Pacer::Stop() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    stopped_ = true;
  }
  cv_.notify_all();
}

bool Pacer::stopped() {
  std::lock_guard<std::mutex> lock(mu_);
  return stopped_;
}

std::string CodeName(grpc::StatusCode code) {
  switch (code) {
    case grpc::StatusCode::OK: return "OK";
    case grpc::StatusCode::CANCELLED: return "CANCELLED";
    case grpc::StatusCode::UNKNOWN: return "UNKNOWN";
    case grpc::StatusCode::INVALID_ARGUMENT: return "INVALID_ARGUMENT";
    case grpc::StatusCode::DEADLINE_EXCEEDED: return "DEADLINE_EXCEEDED";
    case grpc::StatusCode::NOT_FOUND: return "NOT_FOUND";
    case grpc::StatusCode::ALREADY_EXISTS: return "ALREADY_EXISTS";
    case grpc::StatusCode::PERMISSION_DENIED: return "PERMISSION_DENIED";
    case grpc::StatusCode::RESOURCE_EXHAUSTED: return "RESOURCE_EXHAUSTED";
    case grpc::StatusCode::FAILED_PRECONDITION: return "FAILED_PRECONDITION";
    case grpc::StatusCode::ABORTED: return "ABORTED";
    case grpc::StatusCode::OUT_OF_RANGE: return "OUT_OF_RANGE";
    case grpc::StatusCode::UNIMPLEMENTED: return "UNIMPLEMENTED";
    case grpc::StatusCode::INTERNAL: return "INTERNAL";
    case grpc::StatusCode::UNAVAILABLE: return "UNAVAILABLE";
    case grpc::StatusCode::DATA_LOSS: return "DATA_LOSS";
    case grpc::StatusCode::UNAUTHENTICATED: return "UNAUTHENTICATED";
    default: return "CODE_" + std::to_string(static_cast<int>(code));
  }
}

namespace {

// Detail messages are recognised by the type URL's last segment ("type.googleapis.com/google.rpc.ErrorInfo").
bool IsType(const google::protobuf::Any& any, const std::string& full_name) {
  const std::string& url = any.type_url();
  const size_t slash = url.rfind('/');
  return url.substr(slash == std::string::npos ? 0 : slash + 1) == full_name;
}

}  // namespace

ErrorDetails DetailsOf(const grpc::Status& status) {
  ErrorDetails out;
  voxgate_example::rpc::Status rich;
  if (status.error_details().empty() || !rich.ParseFromString(status.error_details())) return out;
  for (const auto& any : rich.details()) {
    if (IsType(any, "google.rpc.ErrorInfo")) {
      voxgate_example::rpc::ErrorInfo info;
      if (info.ParseFromString(any.value())) {
        out.reason = info.reason();
        out.domain = info.domain();
        out.metadata.insert(info.metadata().begin(), info.metadata().end());
      }
    } else if (IsType(any, "google.rpc.BadRequest")) {
      voxgate_example::rpc::BadRequest bad;
      if (bad.ParseFromString(any.value())) {
        for (const auto& v : bad.field_violations()) out.violations.emplace_back(v.field(), v.description());
      }
    } else if (IsType(any, "google.rpc.RetryInfo")) {
      voxgate_example::rpc::RetryInfo retry;
      if (retry.ParseFromString(any.value())) {
        out.retry_delay_s = retry.retry_delay().seconds() + retry.retry_delay().nanos() / 1e9;
      }
    }
  }
  return out;
}

std::string Describe(const grpc::Status& status) {
  const ErrorDetails details = DetailsOf(status);
  std::string line = CodeName(status.error_code());
  if (!details.reason.empty()) line += " (" + details.reason + ")";
  line += ": " + status.error_message();
  for (const auto& [field, description] : details.violations) line += "; " + field + ": " + description;
  if (details.retry_delay_s >= 0) {
    char buf[64];
    std::snprintf(buf, sizeof buf, "; retry in %gs", details.retry_delay_s);
    line += buf;
  }
  return line;
}

Args::Args(int argc, char** argv, const std::vector<std::string>& flags, const std::vector<std::string>& options) {
  auto known = [](const std::vector<std::string>& names, const std::string& name) {
    return std::find(names.begin(), names.end(), name) != names.end();
  };
  for (int i = 1; i < argc && error_.empty(); ++i) {
    std::string arg = argv[i];
    if (arg.size() < 2 || arg[0] != '-') {
      positional_.push_back(arg);
      continue;
    }
    std::string name = arg.substr(arg[1] == '-' ? 2 : 1), value;
    const size_t eq = name.find('=');
    const bool inline_value = eq != std::string::npos;
    if (inline_value) {
      value = name.substr(eq + 1);
      name = name.substr(0, eq);
    }
    if (known(flags, name) && !inline_value) {
      flags_set_[name]++;
    } else if (known(options, name)) {
      if (!inline_value) {
        if (i + 1 >= argc) {
          error_ = "--" + name + " needs a value";
          break;
        }
        value = argv[++i];
      }
      values_.emplace(name, value);
    } else {
      error_ = "unknown option " + arg;
    }
  }
}

std::string Args::Get(const std::string& name, const std::string& fallback) const {
  auto range = values_.equal_range(name);
  return range.first == range.second ? fallback : std::prev(range.second)->second;  // the last one wins
}

std::vector<std::string> Args::GetAll(const std::string& name) const {
  std::vector<std::string> out;
  auto range = values_.equal_range(name);
  for (auto it = range.first; it != range.second; ++it) out.push_back(it->second);
  return out;
}

double Args::Number(const std::string& name, double fallback) {
  if (!Has(name)) return fallback;
  const std::string text = Get(name, "");
  char* end = nullptr;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || *end != '\0' || !std::isfinite(value)) {
    if (error_.empty()) error_ = "--" + name + " must be a number (got '" + text + "')";
    return fallback;
  }
  return value;
}

std::string Trim(const std::string& text) {
  const char* space = " \t\r\n\f\v";
  const size_t first = text.find_first_not_of(space);
  if (first == std::string::npos) return "";
  return text.substr(first, text.find_last_not_of(space) - first + 1);
}

}  // namespace vgx
