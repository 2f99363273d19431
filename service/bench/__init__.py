"""`voxgate bench`: desynchronized real-time sessions through the public gRPC API, measured."""
