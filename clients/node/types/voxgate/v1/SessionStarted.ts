// Original file: proto/voxgate/v1/speech.proto

import type { StreamingConfig as _voxgate_v1_StreamingConfig, StreamingConfig__Output as _voxgate_v1_StreamingConfig__Output } from '../../voxgate/v1/StreamingConfig';
import type { EngineInfo as _voxgate_v1_EngineInfo, EngineInfo__Output as _voxgate_v1_EngineInfo__Output } from '../../voxgate/v1/EngineInfo';
import type { SessionLimits as _voxgate_v1_SessionLimits, SessionLimits__Output as _voxgate_v1_SessionLimits__Output } from '../../voxgate/v1/SessionLimits';
import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';
import type { PositionMode as _voxgate_v1_PositionMode, PositionMode__Output as _voxgate_v1_PositionMode__Output } from '../../voxgate/v1/PositionMode';
import type { InterimStability as _voxgate_v1_InterimStability, InterimStability__Output as _voxgate_v1_InterimStability__Output } from '../../voxgate/v1/InterimStability';
import type { PhraseHintSupport as _voxgate_v1_PhraseHintSupport, PhraseHintSupport__Output as _voxgate_v1_PhraseHintSupport__Output } from '../../voxgate/v1/PhraseHintSupport';

export interface SessionStarted {
  'session_id'?: (string);
  'effective_config'?: (_voxgate_v1_StreamingConfig | null);
  'engine'?: (_voxgate_v1_EngineInfo | null);
  'limits'?: (_voxgate_v1_SessionLimits | null);
  'max_audio_bytes_per_message'?: (number);
  'resume_token'?: (string);
  'resume_window'?: (_google_protobuf_Duration | null);
  'resumed'?: (boolean);
  'position_mode'?: (_voxgate_v1_PositionMode);
  'position_mode_reason'?: (string);
  'interim_stability'?: (_voxgate_v1_InterimStability);
  'phrase_hints'?: (_voxgate_v1_PhraseHintSupport);
}

export interface SessionStarted__Output {
  'session_id': (string);
  'effective_config': (_voxgate_v1_StreamingConfig__Output | null);
  'engine': (_voxgate_v1_EngineInfo__Output | null);
  'limits': (_voxgate_v1_SessionLimits__Output | null);
  'max_audio_bytes_per_message': (number);
  'resume_token': (string);
  'resume_window': (_google_protobuf_Duration__Output | null);
  'resumed': (boolean);
  'position_mode': (_voxgate_v1_PositionMode__Output);
  'position_mode_reason': (string);
  'interim_stability': (_voxgate_v1_InterimStability__Output);
  'phrase_hints': (_voxgate_v1_PhraseHintSupport__Output);
}
