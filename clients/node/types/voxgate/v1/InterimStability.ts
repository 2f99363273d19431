// Original file: proto/voxgate/v1/speech.proto

export const InterimStability = {
  INTERIM_STABILITY_UNSPECIFIED: 'INTERIM_STABILITY_UNSPECIFIED',
  INTERIM_STABILITY_APPEND_ONLY: 'INTERIM_STABILITY_APPEND_ONLY',
  INTERIM_STABILITY_REVISABLE: 'INTERIM_STABILITY_REVISABLE',
} as const;

export type InterimStability =
  | 'INTERIM_STABILITY_UNSPECIFIED'
  | 0
  | 'INTERIM_STABILITY_APPEND_ONLY'
  | 1
  | 'INTERIM_STABILITY_REVISABLE'
  | 2

export type InterimStability__Output = typeof InterimStability[keyof typeof InterimStability]
