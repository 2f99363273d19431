// transcribe: streams an audio file to voxgate (voxgate.v1.Speech/StreamingRecognize) and
// prints each final result as "[start → end] text", like `voxgate transcribe` and the
// Node and Go examples.
//
//   transcribe FILE [--server HOST:PORT] [--no-pace] [--speed N] [--interim] [--language CODE]
//                   [--encoding linear16|mulaw|alaw --sample-rate HZ] [--chunk-ms MS] [--no-resume]
//                   [--non-speech]
//
// FILE is a WAV file (16-bit PCM, any channel count, downmixed to mono; or mono mu-law /
// A-law) or raw audio (then --sample-rate is required; --encoding, default linear16, says
// what it is). The audio goes at its own rate and encoding (the server resamples) in
// --chunk-ms pieces (100), paced in real time as a live source would send it, unless
// --no-pace (as fast as flow control allows) or --speed N (N x real time).
//
// --non-speech asks for the music and DTMF digits the audio carries, printed as
// "[12.80s] (DTMF 5)", "[3.94s] (music started)".
//
// Interim results: on a terminal, a live line redrawn as they come; --interim prints each
// one as a line "(interim) text" instead (for pipes and logs).
//
// The call resumes by default, as `voxgate transcribe` does (resume.h): a dropped connection is
// resumed, a draining server is continued in a new session, a session lost with its server
// process is redone from its last final. --no-resume: one connection, whose end is the end.
//
// Exit status: 0 on success, 1 when the RPC fails (the status code, voxgate's
// google.rpc.ErrorInfo reason and any field violation go to stderr), 2 on bad usage or an
// unreadable file.
#include <sys/ioctl.h>
#include <unistd.h>

#include <cstdio>
#include <memory>
#include <string>

#include "resume.h"
#include "support.h"
#include "voxgate/v1/speech.grpc.pb.h"

namespace pb = voxgate::v1;

namespace {

const char kUsage[] =
    "usage: transcribe FILE [--server HOST:PORT] [--no-pace] [--speed N] [--interim] [--language CODE]\n"
    "                       [--encoding linear16|mulaw|alaw] [--sample-rate HZ] [--chunk-ms MS] [--no-resume]\n"
    "                       [--non-speech]\n";

double Seconds(const google::protobuf::Duration& d) { return d.seconds() + d.nanos() / 1e9; }

pb::AudioEncoding ToProto(vgx::Encoding encoding) {
  switch (encoding) {
    case vgx::Encoding::kMulaw: return pb::AUDIO_ENCODING_MULAW;
    case vgx::Encoding::kAlaw: return pb::AUDIO_ENCODING_ALAW;
    default: return pb::AUDIO_ENCODING_LINEAR16;
  }
}

// Final results as lines; interim results as a live line on a terminal or, asked to, as lines.
class Printer {
 public:
  explicit Printer(bool interim_lines) : interim_lines_(interim_lines), live_(isatty(STDOUT_FILENO) == 1) {}

  void Result(const pb::RecognitionResult& result) {
    const std::string text = vgx::Trim(result.text());
    if (result.is_final()) {
      Clear();
      if (!text.empty()) {
        std::printf("[%.2fs → %.2fs] %s\n", Seconds(result.start_offset()), Seconds(result.end_offset()),
                    text.c_str());
      }
    } else if (interim_lines_) {
      if (!text.empty()) std::printf("(interim) %s\n", text.c_str());
    } else if (live_) {
      const size_t width = Columns() - 1;
      const std::string tail = text.size() > width ? text.substr(text.size() - width) : text;  // no wrapping
      std::printf("\r\x1b[K%s", tail.c_str());
      pending_ = true;
    }
    std::fflush(stdout);
  }

  // Music or a DTMF digit (--non-speech); other speech events print nothing.
  void SpeechEvent(const pb::SpeechEvent& event) {
    std::string said;
    switch (event.type()) {
      case pb::SPEECH_EVENT_TYPE_MUSIC_STARTED: said = "music started"; break;
      case pb::SPEECH_EVENT_TYPE_MUSIC_ENDED: said = "music ended"; break;
      case pb::SPEECH_EVENT_TYPE_DTMF: said = "DTMF " + event.digit(); break;
      default: return;
    }
    Clear();
    std::printf("[%.2fs] (%s)\n", Seconds(event.offset()), said.c_str());
    std::fflush(stdout);
  }

  // A warning or the session's end: on stderr, below any live line.
  void Note(const std::string& line) {
    Clear();
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", line.c_str());
  }

  void Finish() {
    if (pending_) std::printf("\n");  // keep the last interim text visible
    pending_ = false;
    std::fflush(stdout);
  }

 private:
  void Clear() {
    if (pending_) std::printf("\r\x1b[K");
    pending_ = false;
  }

  static size_t Columns() {
    winsize size{};
    return ioctl(STDOUT_FILENO, TIOCGWINSZ, &size) == 0 && size.ws_col > 1 ? size.ws_col : 80;
  }

  bool interim_lines_;
  bool live_;
  bool pending_ = false;
};

int Run(int argc, char** argv) {
  vgx::Args args(argc, argv, {"no-pace", "no-resume", "interim", "non-speech", "help", "h"},
                 {"server", "speed", "language", "encoding", "sample-rate", "chunk-ms"});
  if (args.Flag("help") || args.Flag("h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const double speed = args.Number("speed", 1);
  const double raw_rate = args.Number("sample-rate", 0);
  const double chunk_ms = args.Number("chunk-ms", 100);
  std::string error = args.error();
  vgx::Encoding raw_encoding = vgx::Encoding::kLinear16;
  if (error.empty() && args.positional().size() != 1) error = "exactly one audio file is required";
  if (error.empty() && speed <= 0) error = "--speed must be positive";
  if (error.empty() && (chunk_ms < 10 || chunk_ms > 1000)) error = "--chunk-ms must be 10-1000";
  if (error.empty() && !vgx::ParseEncoding(args.Get("encoding", "linear16"), &raw_encoding)) {
    error = "--encoding must be linear16, mulaw or alaw";
  }
  if (!error.empty()) {
    std::fprintf(stderr, "%stranscribe: error: %s\n", kUsage, error.c_str());
    return 2;
  }
  const std::string path = args.positional()[0];
  vgx::Audio audio;
  if (!vgx::ReadAudio(path, raw_encoding, static_cast<int>(raw_rate), &audio, &error)) {
    std::fprintf(stderr, "transcribe: error: cannot read %s: %s\n", path.c_str(), error.c_str());
    return 2;
  }

  auto channel = grpc::CreateChannel(args.Get("server", "127.0.0.1:50051"), grpc::InsecureChannelCredentials());
  std::unique_ptr<pb::Speech::Stub> stub = pb::Speech::NewStub(channel);

  pb::StreamingConfig config;
  config.set_encoding(ToProto(audio.encoding));
  config.set_sample_rate_hz(audio.sample_rate);
  config.set_audio_channel_count(1);
  config.set_language_code(args.Get("language", ""));
  config.set_interim_results(true);
  config.set_non_speech_events(args.Flag("non-speech"));

  const std::vector<std::string> chunks = vgx::Chunks(audio, static_cast<int>(chunk_ms));
  size_t next = 0;
  vgx::Source source = [&](std::string* piece) {
    if (next == chunks.size()) return false;
    *piece = chunks[next++];
    return true;
  };
  const vgx::ResumePolicy policy;
  vgx::StreamOptions options;
  options.pace = args.Flag("no-pace") ? 0 : speed;
  if (!args.Flag("no-resume")) options.resume = &policy;

  Printer printer(args.Flag("interim"));
  const grpc::Status status = vgx::Stream(stub.get(), config, source, options, [&](const pb::StreamingRecognizeResponse& response) {
    switch (response.response_case()) {
      case pb::StreamingRecognizeResponse::kResult:
        printer.Result(response.result());
        break;
      case pb::StreamingRecognizeResponse::kWarning:
        printer.Note("warning: " + response.warning().code() + ": " + response.warning().message());
        break;
      case pb::StreamingRecognizeResponse::kEnded:
        if (response.ended().reason() != pb::SESSION_END_REASON_CLIENT_END) {
          std::string name = pb::SessionEndReason_Name(response.ended().reason());
          const std::string prefix = "SESSION_END_REASON_";
          if (name.rfind(prefix, 0) == 0) name = name.substr(prefix.size());
          for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
          const std::string& message = response.ended().message();
          printer.Note("session ended: " + name + (message.empty() ? "" : ": " + message));
        }
        break;
      case pb::StreamingRecognizeResponse::kSpeechEvent:
        printer.SpeechEvent(response.speech_event());
        break;
      default:
        break;  // started, flow status
    }
  });
  printer.Finish();
  if (!status.ok()) {
    std::fprintf(stderr, "transcribe: error: %s\n", vgx::Describe(status).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
