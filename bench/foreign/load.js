// The shop's steady traffic for k6: page views at a constant arrival rate (k6's open model, so a slow
// server does not slow the load down), 1 % of them for an image that is not there (a 404, which nginx
// also writes to its error log).
//
//   k6 run -e TARGET=http://127.0.0.1:8080 -e RATE=800 -e DURATION=10m load.js
import http from 'k6/http';

const TARGET = __ENV.TARGET || 'http://127.0.0.1:8080';
const PAGES = ['/', '/products', '/product/42', '/product/7', '/cart', '/search?q=shoes'];

export const options = {
    discardResponseBodies: true,
    scenarios: {
        shop: {
            executor: 'constant-arrival-rate',
            rate: parseInt(__ENV.RATE || '800'),
            timeUnit: '1s',
            duration: __ENV.DURATION || '10m',
            preAllocatedVUs: 50,
            maxVUs: 200,
        },
    },
};

export default function () {
    if (Math.random() < 0.01) {
        http.get(`${TARGET}/static/img/banner-${Math.floor(Math.random() * 100)}.png`);
    } else {
        http.get(`${TARGET}${PAGES[Math.floor(Math.random() * PAGES.length)]}`);
    }
}
