// Original file: proto/voxgate/v1/speech.proto

import type { AudioEncoding as _voxgate_v1_AudioEncoding, AudioEncoding__Output as _voxgate_v1_AudioEncoding__Output } from '../../voxgate/v1/AudioEncoding';
import type { EngineInfo as _voxgate_v1_EngineInfo, EngineInfo__Output as _voxgate_v1_EngineInfo__Output } from '../../voxgate/v1/EngineInfo';
import type { SessionLimits as _voxgate_v1_SessionLimits, SessionLimits__Output as _voxgate_v1_SessionLimits__Output } from '../../voxgate/v1/SessionLimits';
import type { PositionMode as _voxgate_v1_PositionMode, PositionMode__Output as _voxgate_v1_PositionMode__Output } from '../../voxgate/v1/PositionMode';
import type { CapacityCounts as _voxgate_v1_CapacityCounts, CapacityCounts__Output as _voxgate_v1_CapacityCounts__Output } from '../../voxgate/v1/CapacityCounts';
import type { PositionRuntime as _voxgate_v1_PositionRuntime, PositionRuntime__Output as _voxgate_v1_PositionRuntime__Output } from '../../voxgate/v1/PositionRuntime';
import type { InterimStability as _voxgate_v1_InterimStability, InterimStability__Output as _voxgate_v1_InterimStability__Output } from '../../voxgate/v1/InterimStability';
import type { PhraseHintCapabilities as _voxgate_v1_PhraseHintCapabilities, PhraseHintCapabilities__Output as _voxgate_v1_PhraseHintCapabilities__Output } from '../../voxgate/v1/PhraseHintCapabilities';

export interface GetCapabilitiesResponse {
  'encodings'?: (_voxgate_v1_AudioEncoding)[];
  'min_sample_rate_hz'?: (number);
  'max_sample_rate_hz'?: (number);
  'max_audio_channel_count'?: (number);
  'languages'?: (string)[];
  'engine'?: (_voxgate_v1_EngineInfo | null);
  'max_limits'?: (_voxgate_v1_SessionLimits | null);
  'max_audio_bytes_per_message'?: (number);
  'max_sessions'?: (number);
  'active_sessions'?: (number);
  'position_mode'?: (_voxgate_v1_PositionMode);
  'position_mode_reason'?: (string);
  'capacity'?: (_voxgate_v1_CapacityCounts | null);
  'position_runtime'?: (_voxgate_v1_PositionRuntime | null);
  'interim_stability'?: (_voxgate_v1_InterimStability);
  'phrase_hints'?: (_voxgate_v1_PhraseHintCapabilities | null);
}

export interface GetCapabilitiesResponse__Output {
  'encodings': (_voxgate_v1_AudioEncoding__Output)[];
  'min_sample_rate_hz': (number);
  'max_sample_rate_hz': (number);
  'max_audio_channel_count': (number);
  'languages': (string)[];
  'engine': (_voxgate_v1_EngineInfo__Output | null);
  'max_limits': (_voxgate_v1_SessionLimits__Output | null);
  'max_audio_bytes_per_message': (number);
  'max_sessions': (number);
  'active_sessions': (number);
  'position_mode': (_voxgate_v1_PositionMode__Output);
  'position_mode_reason': (string);
  'capacity': (_voxgate_v1_CapacityCounts__Output | null);
  'position_runtime': (_voxgate_v1_PositionRuntime__Output | null);
  'interim_stability': (_voxgate_v1_InterimStability__Output);
  'phrase_hints': (_voxgate_v1_PhraseHintCapabilities__Output | null);
}
