// riva_transcribe: drives voxgate's Riva endpoint
// (nvidia.riva.asr.RivaSpeechRecognition/StreamingRecognize, proto/third_party/riva) the way
// the FreeSWITCH Riva module does (drachtio-freeswitch-modules' mod_nvidia_transcribe,
// nvidia_glue.cpp), so that a media server's Riva integration can point at voxgate:
//
//  - one StreamingRecognizeRequest object for the whole call: first written with
//    streaming_config (RecognitionConfig{encoding, sample_rate_hertz, language_code,
//    max_alternatives 1, profanity_filter, enable_word_time_offsets,
//    enable_automatic_punctuation, verbatim_transcripts, audio_channel_count 1, speech
//    contexts from the hints, model, custom_configuration}, interim_results), then
//    clear_streaming_config() and set_audio_content() per media frame;
//  - 20 ms frames as the media bug delivers them (320 bytes of 8 kHz LINEAR_PCM, the
//    module's CHUNKSIZE), paced in real time;
//  - a second thread reading responses: every result's is_final, stability,
//    audio_processed, channel_tag and alternatives (transcript; confidence and words on
//    finals), as the module's JSON event;
//  - WritesDone() when the call ends, responses read to the end, then Finish().
//
//   riva_transcribe FILE [--server HOST:PORT] [--language en-US] [--frame-ms 20] [--no-pace]
//                        [--no-interim] [--punctuation] [--word-time-offsets] [--verbatim]
//                        [--profanity-filter] [--max-alternatives N] [--model NAME]
//                        [--hints "a,b"] [--hints-boost X] [--custom KEY=VALUE]...
//                        [--encoding linear16|mulaw|alaw --sample-rate HZ]
//
// FILE: a WAV file (16-bit PCM -> LINEAR_PCM, downmixed to mono; mu-law / A-law WAV ->
// MULAW / ALAW) or raw audio (--sample-rate required, --encoding says what it is; 8 kHz
// mu-law is what a G.711 call carries). Audio goes at the file's rate: the module
// resamples the call to 8 kHz first, so give it 8 kHz audio to send what it sends.
//
// Output: one JSON object per result on stdout, as the module hands it to FreeSWITCH:
//   {"is_final":true,"stability":0,"audio_processed":2.12,"channel_tag":0,
//    "alternatives":[{"transcript":"go forward ten meters","confidence":0,"words":[...]}]}
// Exit status: 0 on success, 1 when the RPC fails (status code, voxgate's ErrorInfo
// reason and the offending Riva field on stderr), 2 on bad usage or an unreadable file.
#include <cstdio>
#include <memory>
#include <sstream>
#include <string>
#include <thread>

#include "riva/proto/riva_asr.grpc.pb.h"
#include "riva/proto/riva_audio.pb.h"
#include "support.h"

namespace nr = nvidia::riva;
namespace nr_asr = nvidia::riva::asr;

namespace {

const char kUsage[] =
    "usage: riva_transcribe FILE [--server HOST:PORT] [--language CODE] [--frame-ms MS] [--no-pace]\n"
    "                            [--no-interim] [--punctuation] [--word-time-offsets] [--verbatim]\n"
    "                            [--profanity-filter] [--max-alternatives N] [--model NAME]\n"
    "                            [--hints A,B] [--hints-boost X] [--custom KEY=VALUE]...\n"
    "                            [--encoding linear16|mulaw|alaw] [--sample-rate HZ]\n";

std::string Json(const std::string& text) {
  std::string out = "\"";
  for (const unsigned char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (c < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", c);
          out += buf;
        } else {
          out += static_cast<char>(c);
        }
    }
  }
  return out + "\"";
}

std::string Number(double value) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.9g", value);
  return buf;
}

// The module's JSON event for one result (nvidia_glue.cpp, grpc_read_thread).
std::string ResultJson(const nr_asr::StreamingRecognitionResult& result) {
  std::ostringstream out;
  out << "{\"is_final\":" << (result.is_final() ? "true" : "false")
      << ",\"stability\":" << Number(result.stability())
      << ",\"audio_processed\":" << Number(result.audio_processed())
      << ",\"channel_tag\":" << result.channel_tag() << ",\"alternatives\":[";
  for (int a = 0; a < result.alternatives_size(); ++a) {
    const nr_asr::SpeechRecognitionAlternative& alt = result.alternatives(a);
    out << (a ? "," : "") << "{\"transcript\":" << Json(alt.transcript());
    if (result.is_final()) {
      out << ",\"confidence\":" << Number(alt.confidence()) << ",\"words\":[";
      for (int w = 0; w < alt.words_size(); ++w) {
        const nr_asr::WordInfo& word = alt.words(w);
        out << (w ? "," : "") << "{\"word\":" << Json(word.word()) << ",\"start_time\":" << word.start_time()
            << ",\"end_time\":" << word.end_time() << ",\"confidence\":" << Number(word.confidence())
            << ",\"speaker_tag\":" << word.speaker_tag() << "}";
      }
      out << "]";
    }
    out << "}";
  }
  out << "]}";
  return out.str();
}

nr::AudioEncoding ToRiva(vgx::Encoding encoding) {
  switch (encoding) {
    case vgx::Encoding::kMulaw: return nr::MULAW;
    case vgx::Encoding::kAlaw: return nr::ALAW;
    default: return nr::LINEAR_PCM;
  }
}

int Run(int argc, char** argv) {
  vgx::Args args(argc, argv,
                 {"no-pace", "no-interim", "punctuation", "word-time-offsets", "verbatim", "profanity-filter",
                  "help", "h"},
                 {"server", "language", "frame-ms", "max-alternatives", "model", "hints", "hints-boost", "custom",
                  "encoding", "sample-rate"});
  if (args.Flag("help") || args.Flag("h")) {
    std::fputs(kUsage, stdout);
    return 0;
  }
  const double frame_ms = args.Number("frame-ms", 20);
  const double max_alternatives = args.Number("max-alternatives", 1);
  const double boost = args.Number("hints-boost", 0);
  const double raw_rate = args.Number("sample-rate", 0);
  std::string error = args.error();
  vgx::Encoding raw_encoding = vgx::Encoding::kLinear16;
  if (error.empty() && args.positional().size() != 1) error = "exactly one audio file is required";
  if (error.empty() && (frame_ms < 10 || frame_ms > 1000)) error = "--frame-ms must be 10-1000";
  if (error.empty() && !vgx::ParseEncoding(args.Get("encoding", "linear16"), &raw_encoding)) {
    error = "--encoding must be linear16, mulaw or alaw";
  }
  for (const std::string& kv : args.GetAll("custom")) {
    if (error.empty() && kv.find('=') == std::string::npos) error = "--custom takes KEY=VALUE";
  }
  if (!error.empty()) {
    std::fprintf(stderr, "%sriva_transcribe: error: %s\n", kUsage, error.c_str());
    return 2;
  }
  const std::string path = args.positional()[0];
  vgx::Audio audio;
  if (!vgx::ReadAudio(path, raw_encoding, static_cast<int>(raw_rate), &audio, &error)) {
    std::fprintf(stderr, "riva_transcribe: error: cannot read %s: %s\n", path.c_str(), error.c_str());
    return 2;
  }

  // GStreamer::createInitMessage()
  auto channel = grpc::CreateChannel(args.Get("server", "127.0.0.1:50051"), grpc::InsecureChannelCredentials());
  std::unique_ptr<nr_asr::RivaSpeechRecognition::Stub> stub = nr_asr::RivaSpeechRecognition::NewStub(channel);
  nr_asr::StreamingRecognizeRequest request;
  nr_asr::StreamingRecognitionConfig* streaming_config = request.mutable_streaming_config();
  streaming_config->set_interim_results(!args.Flag("no-interim"));
  nr_asr::RecognitionConfig* config = streaming_config->mutable_config();
  config->set_sample_rate_hertz(audio.sample_rate);
  config->set_encoding(ToRiva(audio.encoding));
  config->set_audio_channel_count(1);
  config->set_language_code(args.Get("language", "en-US"));
  if (args.Has("model")) config->set_model(args.Get("model", ""));
  config->set_max_alternatives(static_cast<int>(max_alternatives));
  config->set_profanity_filter(args.Flag("profanity-filter"));
  config->set_enable_word_time_offsets(args.Flag("word-time-offsets"));
  config->set_enable_automatic_punctuation(args.Flag("punctuation"));
  config->set_verbatim_transcripts(args.Flag("verbatim"));
  if (args.Has("hints")) {  // NVIDIA_HINTS as a comma-separated list, NVIDIA_HINTS_BOOST
    nr_asr::SpeechContext* context = config->add_speech_contexts();
    std::istringstream hints(args.Get("hints", ""));
    for (std::string phrase; std::getline(hints, phrase, ',');) {
      if (!phrase.empty()) context->add_phrases(phrase);
    }
    if (args.Has("hints-boost")) context->set_boost(static_cast<float>(boost));
  }
  for (const std::string& kv : args.GetAll("custom")) {  // NVIDIA_CUSTOM_CONFIGURATION
    const size_t eq = kv.find('=');
    (*config->mutable_custom_configuration())[kv.substr(0, eq)] = kv.substr(eq + 1);
  }

  // GStreamer::connect(): the stream, then the config alone, then the audio in the same request object.
  grpc::ClientContext context;
  std::unique_ptr<grpc::ClientReaderWriterInterface<nr_asr::StreamingRecognizeRequest,
                                                    nr_asr::StreamingRecognizeResponse>>
      streamer = stub->StreamingRecognize(&context);
  const std::vector<std::string> frames = vgx::Chunks(audio, static_cast<int>(frame_ms));
  const double bytes_per_second = static_cast<double>(audio.sample_rate) * vgx::BytesPerSample(audio.encoding);
  vgx::Pacer pacer(args.Flag("no-pace") ? 0 : 1);
  std::thread media([&] {  // the media bug's frames
    if (!streamer->Write(request)) return;
    request.clear_streaming_config();
    double sent_s = 0;
    for (const std::string& frame : frames) {
      if (!pacer.WaitFor(sent_s)) return;
      request.clear_audio_content();
      request.set_audio_content(frame.data(), frame.size());
      if (!streamer->Write(request)) return;
      sent_s += frame.size() / bytes_per_second;
    }
    streamer->WritesDone();  // nvidia_speech_session_cleanup()
  });

  // grpc_read_thread()
  nr_asr::StreamingRecognizeResponse response;
  while (streamer->Read(&response)) {
    for (const nr_asr::StreamingRecognitionResult& result : response.results()) {
      std::printf("%s\n", ResultJson(result).c_str());
    }
    std::fflush(stdout);
  }
  pacer.Stop();
  media.join();
  const grpc::Status status = streamer->Finish();
  if (!status.ok()) {
    std::fprintf(stderr, "riva_transcribe: error: %s\n", vgx::Describe(status).c_str());
    return 1;
  }
  return 0;
}

}  // namespace

int main(int argc, char** argv) { return Run(argc, argv); }
