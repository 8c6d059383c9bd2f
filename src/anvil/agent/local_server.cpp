// local_server.cpp: placeholder, being written.
