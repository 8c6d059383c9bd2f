// model_client.cpp: placeholder, being written.
