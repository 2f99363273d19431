// Original file: proto/voxgate/v1/speech.proto

export const AudioEncoding = {
  AUDIO_ENCODING_UNSPECIFIED: 'AUDIO_ENCODING_UNSPECIFIED',
  AUDIO_ENCODING_LINEAR16: 'AUDIO_ENCODING_LINEAR16',
  AUDIO_ENCODING_MULAW: 'AUDIO_ENCODING_MULAW',
  AUDIO_ENCODING_ALAW: 'AUDIO_ENCODING_ALAW',
} as const;

export type AudioEncoding =
  | 'AUDIO_ENCODING_UNSPECIFIED'
  | 0
  | 'AUDIO_ENCODING_LINEAR16'
  | 1
  | 'AUDIO_ENCODING_MULAW'
  | 2
  | 'AUDIO_ENCODING_ALAW'
  | 3

export type AudioEncoding__Output = typeof AudioEncoding[keyof typeof AudioEncoding]
