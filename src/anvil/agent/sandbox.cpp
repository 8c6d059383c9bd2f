// sandbox.cpp: placeholder, being written.
