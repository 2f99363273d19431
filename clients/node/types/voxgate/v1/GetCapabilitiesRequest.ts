// Original file: proto/voxgate/v1/speech.proto


export interface GetCapabilitiesRequest {
}

export interface GetCapabilitiesRequest__Output {
}
