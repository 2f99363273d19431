// Original file: proto/voxgate/v1/speech.proto

import type * as grpc from '@grpc/grpc-js'
import type { MethodDefinition } from '@grpc/proto-loader'
import type { GetCapabilitiesRequest as _voxgate_v1_GetCapabilitiesRequest, GetCapabilitiesRequest__Output as _voxgate_v1_GetCapabilitiesRequest__Output } from '../../voxgate/v1/GetCapabilitiesRequest';
import type { GetCapabilitiesResponse as _voxgate_v1_GetCapabilitiesResponse, GetCapabilitiesResponse__Output as _voxgate_v1_GetCapabilitiesResponse__Output } from '../../voxgate/v1/GetCapabilitiesResponse';
import type { StreamingRecognizeRequest as _voxgate_v1_StreamingRecognizeRequest, StreamingRecognizeRequest__Output as _voxgate_v1_StreamingRecognizeRequest__Output } from '../../voxgate/v1/StreamingRecognizeRequest';
import type { StreamingRecognizeResponse as _voxgate_v1_StreamingRecognizeResponse, StreamingRecognizeResponse__Output as _voxgate_v1_StreamingRecognizeResponse__Output } from '../../voxgate/v1/StreamingRecognizeResponse';

export interface SpeechClient extends grpc.Client {
  GetCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  GetCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  GetCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  GetCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  getCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, metadata: grpc.Metadata, options: grpc.CallOptions, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  getCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, metadata: grpc.Metadata, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  getCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, options: grpc.CallOptions, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  getCapabilities(argument: _voxgate_v1_GetCapabilitiesRequest, callback: grpc.requestCallback<_voxgate_v1_GetCapabilitiesResponse__Output>): grpc.ClientUnaryCall;
  
  StreamingRecognize(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_voxgate_v1_StreamingRecognizeRequest, _voxgate_v1_StreamingRecognizeResponse__Output>;
  StreamingRecognize(options?: grpc.CallOptions): grpc.ClientDuplexStream<_voxgate_v1_StreamingRecognizeRequest, _voxgate_v1_StreamingRecognizeResponse__Output>;
  streamingRecognize(metadata: grpc.Metadata, options?: grpc.CallOptions): grpc.ClientDuplexStream<_voxgate_v1_StreamingRecognizeRequest, _voxgate_v1_StreamingRecognizeResponse__Output>;
  streamingRecognize(options?: grpc.CallOptions): grpc.ClientDuplexStream<_voxgate_v1_StreamingRecognizeRequest, _voxgate_v1_StreamingRecognizeResponse__Output>;
  
}

export interface SpeechHandlers extends grpc.UntypedServiceImplementation {
  GetCapabilities: grpc.handleUnaryCall<_voxgate_v1_GetCapabilitiesRequest__Output, _voxgate_v1_GetCapabilitiesResponse>;
  
  StreamingRecognize: grpc.handleBidiStreamingCall<_voxgate_v1_StreamingRecognizeRequest__Output, _voxgate_v1_StreamingRecognizeResponse>;
  
}

export interface SpeechDefinition extends grpc.ServiceDefinition {
  GetCapabilities: MethodDefinition<_voxgate_v1_GetCapabilitiesRequest, _voxgate_v1_GetCapabilitiesResponse, _voxgate_v1_GetCapabilitiesRequest__Output, _voxgate_v1_GetCapabilitiesResponse__Output>
  StreamingRecognize: MethodDefinition<_voxgate_v1_StreamingRecognizeRequest, _voxgate_v1_StreamingRecognizeResponse, _voxgate_v1_StreamingRecognizeRequest__Output, _voxgate_v1_StreamingRecognizeResponse__Output>
}
