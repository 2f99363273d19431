// Original file: proto/voxgate/v1/speech.proto

export const SpeechEventType = {
  SPEECH_EVENT_TYPE_UNSPECIFIED: 'SPEECH_EVENT_TYPE_UNSPECIFIED',
  SPEECH_EVENT_TYPE_SPEECH_STARTED: 'SPEECH_EVENT_TYPE_SPEECH_STARTED',
  SPEECH_EVENT_TYPE_SPEECH_ENDED: 'SPEECH_EVENT_TYPE_SPEECH_ENDED',
} as const;

export type SpeechEventType =
  | 'SPEECH_EVENT_TYPE_UNSPECIFIED'
  | 0
  | 'SPEECH_EVENT_TYPE_SPEECH_STARTED'
  | 1
  | 'SPEECH_EVENT_TYPE_SPEECH_ENDED'
  | 2

export type SpeechEventType__Output = typeof SpeechEventType[keyof typeof SpeechEventType]
