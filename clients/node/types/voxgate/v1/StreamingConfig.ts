// Original file: proto/voxgate/v1/speech.proto

import type { AudioEncoding as _voxgate_v1_AudioEncoding, AudioEncoding__Output as _voxgate_v1_AudioEncoding__Output } from '../../voxgate/v1/AudioEncoding';
import type { EndpointingConfig as _voxgate_v1_EndpointingConfig, EndpointingConfig__Output as _voxgate_v1_EndpointingConfig__Output } from '../../voxgate/v1/EndpointingConfig';
import type { SessionLimits as _voxgate_v1_SessionLimits, SessionLimits__Output as _voxgate_v1_SessionLimits__Output } from '../../voxgate/v1/SessionLimits';
import type { FlowStatusConfig as _voxgate_v1_FlowStatusConfig, FlowStatusConfig__Output as _voxgate_v1_FlowStatusConfig__Output } from '../../voxgate/v1/FlowStatusConfig';
import type { ChannelMode as _voxgate_v1_ChannelMode, ChannelMode__Output as _voxgate_v1_ChannelMode__Output } from '../../voxgate/v1/ChannelMode';
import type { PhraseHints as _voxgate_v1_PhraseHints, PhraseHints__Output as _voxgate_v1_PhraseHints__Output } from '../../voxgate/v1/PhraseHints';
import type { Long } from '@grpc/proto-loader';

export interface StreamingConfig {
  'encoding'?: (_voxgate_v1_AudioEncoding);
  'sample_rate_hz'?: (number);
  'audio_channel_count'?: (number);
  'language_code'?: (string);
  'interim_results'?: (boolean);
  'enable_word_time_offsets'?: (boolean);
  'endpointing'?: (_voxgate_v1_EndpointingConfig | null);
  'limits'?: (_voxgate_v1_SessionLimits | null);
  'resume_token'?: (string);
  'resume_last_seq'?: (number | string | Long);
  'resume_audio_bytes'?: (number | string | Long);
  'flow_status'?: (_voxgate_v1_FlowStatusConfig | null);
  'channel_mode'?: (_voxgate_v1_ChannelMode);
  'phrase_hints'?: (_voxgate_v1_PhraseHints | null);
  'non_speech_events'?: (boolean);
}

export interface StreamingConfig__Output {
  'encoding': (_voxgate_v1_AudioEncoding__Output);
  'sample_rate_hz': (number);
  'audio_channel_count': (number);
  'language_code': (string);
  'interim_results': (boolean);
  'enable_word_time_offsets': (boolean);
  'endpointing': (_voxgate_v1_EndpointingConfig__Output | null);
  'limits': (_voxgate_v1_SessionLimits__Output | null);
  'resume_token': (string);
  'resume_last_seq': (string);
  'resume_audio_bytes': (string);
  'flow_status': (_voxgate_v1_FlowStatusConfig__Output | null);
  'channel_mode': (_voxgate_v1_ChannelMode__Output);
  'phrase_hints': (_voxgate_v1_PhraseHints__Output | null);
  'non_speech_events': (boolean);
}
