set terminal pngcairo size 800,560 noenhanced
set output 'bench/results/paper/TinyStories-656K-default/ppl_tinystories-valid.png'
set logscale y
set grid
set key top left
set xlabel 'compression ratio (%)'
set ylabel 'perplexity (tinystories-valid)'
set title 'TinyStories-656K'
plot 35.00014432771984 title 'dense' with lines dashtype 2 lc rgb 'black', '-' using 1:2 with linespoints title 'latentllm'
10 36.43107154092955
20 40.61422147006933
30 52.58593679973299
40 78.409768329656
e
