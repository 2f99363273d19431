// Original file: proto/voxgate/v1/speech.proto

import type { SpeechEventType as _voxgate_v1_SpeechEventType, SpeechEventType__Output as _voxgate_v1_SpeechEventType__Output } from '../../voxgate/v1/SpeechEventType';
import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';

export interface SpeechEvent {
  'type'?: (_voxgate_v1_SpeechEventType);
  'offset'?: (_google_protobuf_Duration | null);
  'channel'?: (number);
  'digit'?: (string);
}

export interface SpeechEvent__Output {
  'type': (_voxgate_v1_SpeechEventType__Output);
  'offset': (_google_protobuf_Duration__Output | null);
  'channel': (number);
  'digit': (string);
}
