// Original file: proto/voxgate/v1/speech.proto

import type { PhraseHintSupport as _voxgate_v1_PhraseHintSupport, PhraseHintSupport__Output as _voxgate_v1_PhraseHintSupport__Output } from '../../voxgate/v1/PhraseHintSupport';

export interface PhraseHintCapabilities {
  'support'?: (_voxgate_v1_PhraseHintSupport);
  'max_phrases'?: (number);
  'max_phrase_chars'?: (number);
  'min_boost'?: (number | string);
  'max_boost'?: (number | string);
  'default_boost'?: (number | string);
}

export interface PhraseHintCapabilities__Output {
  'support': (_voxgate_v1_PhraseHintSupport__Output);
  'max_phrases': (number);
  'max_phrase_chars': (number);
  'min_boost': (number);
  'max_boost': (number);
  'default_boost': (number);
}
