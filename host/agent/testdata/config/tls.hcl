region = "eu"
tls {
  ca_file   = "/etc/berth/berth-agent-ca.pem"
  cert_file = "/etc/berth/eu-server-berth.pem"
  key_file  = "/etc/berth/eu-server-berth-key.pem"
  rpc  = true
  http = true
  verify_server_hostname = true
  verify_https_client    = true
}
