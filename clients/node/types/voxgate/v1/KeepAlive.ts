// Original file: proto/voxgate/v1/speech.proto


export interface KeepAlive {
}

export interface KeepAlive__Output {
}
