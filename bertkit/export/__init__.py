"""Deployment formats: ONNX export (`onnx.py`) and running an export with ONNX Runtime (`runtime.py`)."""
