// Original file: proto/voxgate/v1/speech.proto

import type { PhraseHints as _voxgate_v1_PhraseHints, PhraseHints__Output as _voxgate_v1_PhraseHints__Output } from '../../voxgate/v1/PhraseHints';
import type { Duration as _google_protobuf_Duration, Duration__Output as _google_protobuf_Duration__Output } from '../../google/protobuf/Duration';

export interface PhraseHintsUpdated {
  'phrase_hints'?: (_voxgate_v1_PhraseHints | null);
  'audio_offset'?: (_google_protobuf_Duration | null);
}

export interface PhraseHintsUpdated__Output {
  'phrase_hints': (_voxgate_v1_PhraseHints__Output | null);
  'audio_offset': (_google_protobuf_Duration__Output | null);
}
