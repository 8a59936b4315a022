/* bench.outside's C floor under the mailbox round trip: a libzmq ROUTER that hands each
 * message from peer "a" to peer "b" and back, in C, and does nothing else. Whatever a
 * broker built on libzmq does (the original Malamute is one), it does this too.
 *
 *   zmq_relay PORT     (prints "ready" once bound; a message of one empty frame ends it)
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <errno.h>
#include <unistd.h>
#include <zmq.h>

int main(int argc, char **argv) {
    void *context = zmq_ctx_new();
    void *router = zmq_socket(context, ZMQ_ROUTER);
    int mandatory = 1;
    char endpoint[64];
    zmq_setsockopt(router, ZMQ_ROUTER_MANDATORY, &mandatory, sizeof mandatory);
    snprintf(endpoint, sizeof endpoint, "tcp://127.0.0.1:%s", argc > 1 ? argv[1] : "5555");
    if (zmq_bind(router, endpoint) != 0) {
        fprintf(stderr, "bind %s: %s\n", endpoint, zmq_strerror(errno));
        return 1;
    }
    printf("ready\n");
    fflush(stdout);
    zmq_msg_t parts[16];
    for (;;) {
        int n = 0, more = 1;
        while (more && n < 16) {
            zmq_msg_init(&parts[n]);
            if (zmq_msg_recv(&parts[n], router, 0) < 0)
                return 1;
            more = zmq_msg_more(&parts[n]);
            n++;
        }
        if (n == 2 && zmq_msg_size(&parts[1]) == 0)     /* the cue to end */
            break;
        /* routing ids are "a" and "b": the other one */
        char other = *(char *) zmq_msg_data(&parts[0]) == 'a' ? 'b' : 'a';
        for (;;) {       /* the first ping can come before the other peer is connected */
            if (zmq_send(router, &other, 1, ZMQ_SNDMORE) == 1)
                break;
            if (errno != EHOSTUNREACH)
                return 1;
            usleep(1000);
        }
        for (int i = 1; i < n; i++)
            zmq_msg_send(&parts[i], router, i + 1 < n ? ZMQ_SNDMORE : 0);
        zmq_msg_close(&parts[0]);
    }
    zmq_close(router);
    zmq_ctx_term(context);
    return 0;
}
