// Preloaded into the npm servers the tests run (node --import): a server told only a port
// listens on 127.0.0.1 instead of every address, so the tests reach loopback only.
import net from "node:net";

const listen = net.Server.prototype.listen;
net.Server.prototype.listen = function (...args) {
  const port = args[0];
  if ((typeof port === "number" || /^\d+$/.test(String(port))) && typeof args[1] !== "string") {
    args.splice(1, 0, "127.0.0.1");
  }
  return listen.apply(this, args);
};
