// Original file: proto/voxgate/v1/speech.proto

export const ChannelMode = {
  CHANNEL_MODE_UNSPECIFIED: 'CHANNEL_MODE_UNSPECIFIED',
  CHANNEL_MODE_SEPARATE: 'CHANNEL_MODE_SEPARATE',
  CHANNEL_MODE_DOWNMIX: 'CHANNEL_MODE_DOWNMIX',
  CHANNEL_MODE_FIRST: 'CHANNEL_MODE_FIRST',
} as const;

export type ChannelMode =
  | 'CHANNEL_MODE_UNSPECIFIED'
  | 0
  | 'CHANNEL_MODE_SEPARATE'
  | 1
  | 'CHANNEL_MODE_DOWNMIX'
  | 2
  | 'CHANNEL_MODE_FIRST'
  | 3

export type ChannelMode__Output = typeof ChannelMode[keyof typeof ChannelMode]
