package sinkadmin.spark;

import java.net.InetAddress;
import java.net.InetSocketAddress;
import java.net.SocketAddress;
import org.sparkproject.connect.grpc.Grpc;
import org.sparkproject.connect.grpc.Metadata;
import org.sparkproject.connect.grpc.ServerCall;
import org.sparkproject.connect.grpc.ServerCallHandler;
import org.sparkproject.connect.grpc.ServerInterceptor;
import org.sparkproject.connect.grpc.Status;

/**
 * Refuses every call whose peer is not on a loopback address, before any of the Spark Connect
 * server's handlers sees it.
 *
 * <p>Spark 3.5's Spark Connect server listens on every interface (spark.connect.grpc.binding.address
 * came in 4.0), and whoever reaches its port can run code in it. sinkadmin's local server installs
 * this through {@code spark.connect.grpc.interceptor.classes} (sinkadmin.services.start_spark_connect),
 * so only this machine is answered. A peer that is not an IP socket (an in-process channel) is
 * answered.
 */
public final class LoopbackOnlyInterceptor implements ServerInterceptor {
  static final String REFUSAL =
      "sinkadmin's Spark Connect server answers only this machine (loopback); "
          + "set SPARK_REMOTE to a server meant for remote clients";

  /** Spark makes its interceptors with their no-argument constructor. */
  public LoopbackOnlyInterceptor() {}

  @Override
  public <ReqT, RespT> ServerCall.Listener<ReqT> interceptCall(
      ServerCall<ReqT, RespT> call, Metadata headers, ServerCallHandler<ReqT, RespT> next) {
    SocketAddress peer = call.getAttributes().get(Grpc.TRANSPORT_ATTR_REMOTE_ADDR);
    if (peer instanceof InetSocketAddress inet && !isLoopback(inet.getAddress())) {
      call.close(Status.PERMISSION_DENIED.withDescription(REFUSAL + " (peer " + peer + ")"), new Metadata());
      return new ServerCall.Listener<ReqT>() {}; // the call's messages go nowhere
    }
    return next.startCall(call, headers);
  }

  /** 127.0.0.0/8 and ::1 (Java reads an IPv4-mapped peer as IPv4); an unresolved address is not. */
  static boolean isLoopback(InetAddress address) {
    return address != null && address.isLoopbackAddress();
  }
}
