// What both examples share: reading the audio, pacing it, command-line options and
// rendering a failed call's status (code, voxgate's ErrorInfo reason, field violations).
#pragma once

#include <chrono>
#include <condition_variable>
#include <map>
#include <mutex>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

namespace vgx {

enum class Encoding { kLinear16, kMulaw, kAlaw };

// "linear16" / "mulaw" / "alaw" (also "pcm", "ulaw", "g711u", "g711a"); false when unknown.
bool ParseEncoding(const std::string& name, Encoding* out);
int BytesPerSample(Encoding encoding);

struct Audio {
  Encoding encoding = Encoding::kLinear16;
  int sample_rate = 0;
  int source_channels = 1;  // the file's channel count (16-bit PCM is downmixed to mono)
  std::string bytes;        // mono audio in `encoding`
};

// A RIFF/WAVE file (16-bit PCM, any channel count, averaged to mono; or mono mu-law /
// A-law, WAVE format 7 / 6, sent as they are), or, when the file has no RIFF header,
// raw audio in `raw_encoding` at `raw_rate` (which must then be > 0). On failure: false
// and a reason in *error.
bool ReadAudio(const std::string& path, Encoding raw_encoding, int raw_rate, Audio* out, std::string* error);

// Split on whole samples: `ms` milliseconds per piece (the last one may be shorter).
std::vector<std::string> Chunks(const Audio& audio, int ms);

// Sleeps until each chunk's due time at `speed` x real time; Stop() wakes it for good.
class Pacer {
 public:
  explicit Pacer(double speed) : speed_(speed), start_(std::chrono::steady_clock::now()) {}
  // Waits until `audio_seconds` of audio are due (no wait when speed is 0). False once stopped.
  bool WaitFor(double audio_seconds);
  void Stop();
  bool stopped();

 private:
  double speed_;
  std::chrono::steady_clock::time_point start_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stopped_ = false;
};

// The canonical name of a status code: INVALID_ARGUMENT, UNAVAILABLE, ...
std::string CodeName(grpc::StatusCode code);

struct ErrorDetails {
  std::string reason;  // google.rpc.ErrorInfo.reason, e.g. UNSUPPORTED_AUDIO_FORMAT ("" if none)
  std::string domain;
  std::map<std::string, std::string> metadata;             // ErrorInfo.metadata (voxgate: "field", ...)
  std::vector<std::pair<std::string, std::string>> violations;  // BadRequest: field, description
  double retry_delay_s = -1;                               // RetryInfo; < 0 if none
};

// Parses the google.rpc.Status in status.error_details() (the grpc-status-details-bin trailer).
ErrorDetails DetailsOf(const grpc::Status& status);

// One line, like the Python, Node and Go clients:
// "INVALID_ARGUMENT (UNSUPPORTED_AUDIO_FORMAT): message; field: description; retry in 2s".
std::string Describe(const grpc::Status& status);

// A small option parser: "--name value", "--name=value" or "-name value", flags anywhere,
// positional arguments kept in order.
class Args {
 public:
  Args(int argc, char** argv, const std::vector<std::string>& flags, const std::vector<std::string>& options);
  bool ok() const { return error_.empty(); }
  const std::string& error() const { return error_; }
  bool Flag(const std::string& name) const { return flags_set_.count(name) > 0; }
  bool Has(const std::string& name) const { return values_.count(name) > 0; }
  std::string Get(const std::string& name, const std::string& fallback) const;
  std::vector<std::string> GetAll(const std::string& name) const;  // a repeatable option
  // The option as a number; sets the parser's error when it is not one.
  double Number(const std::string& name, double fallback);
  const std::vector<std::string>& positional() const { return positional_; }

 private:
  std::string error_;
  std::map<std::string, int> flags_set_;
  std::multimap<std::string, std::string> values_;
  std::vector<std::string> positional_;
};

std::string Trim(const std::string& text);

}  // namespace vgx
