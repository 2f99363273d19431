// Original file: proto/voxgate/v1/speech.proto

export const PhraseHintSupport = {
  PHRASE_HINT_SUPPORT_UNSPECIFIED: 'PHRASE_HINT_SUPPORT_UNSPECIFIED',
  PHRASE_HINT_SUPPORT_NONE: 'PHRASE_HINT_SUPPORT_NONE',
  PHRASE_HINT_SUPPORT_PROMPT: 'PHRASE_HINT_SUPPORT_PROMPT',
  PHRASE_HINT_SUPPORT_BOOST: 'PHRASE_HINT_SUPPORT_BOOST',
} as const;

export type PhraseHintSupport =
  | 'PHRASE_HINT_SUPPORT_UNSPECIFIED'
  | 0
  | 'PHRASE_HINT_SUPPORT_NONE'
  | 1
  | 'PHRASE_HINT_SUPPORT_PROMPT'
  | 2
  | 'PHRASE_HINT_SUPPORT_BOOST'
  | 3

export type PhraseHintSupport__Output = typeof PhraseHintSupport[keyof typeof PhraseHintSupport]
