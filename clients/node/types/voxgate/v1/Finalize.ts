// Original file: proto/voxgate/v1/speech.proto


export interface Finalize {
}

export interface Finalize__Output {
}
