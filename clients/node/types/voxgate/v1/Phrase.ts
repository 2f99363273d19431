// Original file: proto/voxgate/v1/speech.proto


export interface Phrase {
  'value'?: (string);
  'boost'?: (number | string);
  '_boost'?: "boost";
}

export interface Phrase__Output {
  'value': (string);
  'boost'?: (number);
  '_boost'?: "boost";
}
