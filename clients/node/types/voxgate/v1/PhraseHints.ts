// Original file: proto/voxgate/v1/speech.proto

import type { Phrase as _voxgate_v1_Phrase, Phrase__Output as _voxgate_v1_Phrase__Output } from '../../voxgate/v1/Phrase';

export interface PhraseHints {
  'phrases'?: (_voxgate_v1_Phrase)[];
  'boost'?: (number | string);
  '_boost'?: "boost";
}

export interface PhraseHints__Output {
  'phrases': (_voxgate_v1_Phrase__Output)[];
  'boost'?: (number);
  '_boost'?: "boost";
}
