// Original file: proto/voxgate/v1/speech.proto

export const PositionMode = {
  POSITION_MODE_UNSPECIFIED: 'POSITION_MODE_UNSPECIFIED',
  POSITION_MODE_REANCHOR: 'POSITION_MODE_REANCHOR',
  POSITION_MODE_ROLLOVER: 'POSITION_MODE_ROLLOVER',
  POSITION_MODE_CAPPED: 'POSITION_MODE_CAPPED',
} as const;

export type PositionMode =
  | 'POSITION_MODE_UNSPECIFIED'
  | 0
  | 'POSITION_MODE_REANCHOR'
  | 1
  | 'POSITION_MODE_ROLLOVER'
  | 2
  | 'POSITION_MODE_CAPPED'
  | 3

export type PositionMode__Output = typeof PositionMode[keyof typeof PositionMode]
